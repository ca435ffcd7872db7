package spmd

import (
	"context"
	"fmt"
	"os"
)

// Single is the communicator of a job with one rank: every collective is
// local and immediate.
type Single struct {
	host string
}

// NewSingle returns a one-rank communicator on this host.
func NewSingle() *Single {
	h, _ := os.Hostname()
	return &Single{host: h}
}

func (s *Single) Rank() int      { return 0 }
func (s *Single) Size() int      { return 1 }
func (s *Single) LocalRank() int { return 0 }
func (s *Single) Host() string   { return s.host }
func (s *Single) Kind() string   { return "single" }

func (s *Single) Barrier(ctx context.Context) error { return ctx.Err() }

func (s *Single) AllreduceInt64(ctx context.Context, op Op, v []int64) error { return ctx.Err() }

func (s *Single) AllreduceFloat64(ctx context.Context, op Op, v []float64) error { return ctx.Err() }

func (s *Single) ReduceInt64(ctx context.Context, root int, op Op, v []int64) error {
	return checkRoot(root, 1)
}

func (s *Single) Gather(ctx context.Context, root int, b []byte) ([][]byte, error) {
	if err := checkRoot(root, 1); err != nil {
		return nil, err
	}
	return [][]byte{append([]byte(nil), b...)}, nil
}

func (s *Single) Bcast(ctx context.Context, root int, b []byte) ([]byte, error) {
	if err := checkRoot(root, 1); err != nil {
		return nil, err
	}
	return b, nil
}

func (s *Single) Split(ctx context.Context, color, key int) (Comm, error) {
	if color == Undefined {
		return nil, nil
	}
	return s, nil
}

func (s *Single) Abort(code int) { os.Exit(code) }

func (s *Single) Close() error { return nil }

func checkRoot(root, size int) error {
	if root < 0 || root >= size {
		return fmt.Errorf("spmd: root %d out of range [0,%d)", root, size)
	}
	return nil
}
