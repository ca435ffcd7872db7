//go:build !linux

package uring

// Ring is unusable off Linux: New always fails.
type Ring struct{}

func isPerm(error) bool  { return false }
func isNoSys(error) bool { return false }

// SetSetupHookForTest exists so tests compile everywhere.
func SetSetupHookForTest(error) {}

// New fails with ErrUnsupported.
func New(uint32) (*Ring, error) { return nil, ErrUnsupported }

// Punts fails with ErrUnsupported.
func Punts(int, bool) (Punt, error) { return Punt{}, ErrUnsupported }

func (r *Ring) Entries() int                   { return 0 }
func (r *Ring) Get() *SQE                      { return nil }
func (r *Ring) Enter(uint32) (int, error)      { return 0, ErrUnsupported }
func (r *Ring) Peek() *CQE                     { return nil }
func (r *Ring) Enters() int64                  { return 0 }
func (r *Ring) Advance()                       {}
func (r *Ring) RegisterBuffers([][]byte) error { return ErrUnsupported }
func (r *Ring) RegisterFiles([]int) error      { return ErrUnsupported }
func (r *Ring) SingleIssuer() bool             { return false }
func (r *Ring) Enable() error                  { return nil }
func (r *Ring) Close() error                   { return nil }
