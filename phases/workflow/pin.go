package workflow

import (
	"strings"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases"
)

// pinned is a working directory of a workflow phase below the rank's
// directory, opened once. The family's code is path-based (git runs as a
// child process, the archiver walks trees with the standard library), so
// it uses the directory's /proc/self/fd path (proc), which leads to this
// very directory while it is open: renaming the run directory, or putting
// a link in its place, above it cannot redirect a clone, an archive or an
// extraction. Messages name path instead.
type pinned struct {
	dir  *pio.Dir
	proc string
	path string
}

// pin opens (creating it when missing) sub below the rank's directory.
func pin(env *phases.Env, sub string) (pinned, error) {
	d, err := env.Own.EnsureSub(sub, 0o755)
	if err != nil {
		return pinned{}, env.Errorf("setup: %w", err)
	}
	return pinned{dir: d, proc: d.ProcPath(), path: d.Path()}, nil
}

// pinRun opens rel below the run directory: an earlier phase's directory.
func pinRun(env *phases.Env, rel string) (pinned, error) {
	d, err := env.Run.OpenPath(rel)
	if err != nil {
		return pinned{}, env.Errorf("setup: %w", err)
	}
	return pinned{dir: d, proc: d.ProcPath(), path: d.Path()}, nil
}

// join is the proc path of rel below the directory.
func (p pinned) join(rel string) string { return p.proc + "/" + rel }

// shown is how messages name rel (or a proc path) below the directory.
func (p pinned) shown(rel string) string {
	if strings.HasPrefix(rel, p.proc) {
		return p.path + strings.TrimPrefix(rel, p.proc)
	}
	return p.path + "/" + rel
}

// clean rewrites the proc path in an error's text into the directory's
// path; the chain below stays inspectable with errors.Is/As.
func (p pinned) clean(err error) error {
	if err == nil || p.proc == "" || !strings.Contains(err.Error(), p.proc) {
		return err
	}
	return &cleanError{msg: strings.ReplaceAll(err.Error(), p.proc, p.path), err: err}
}

type cleanError struct {
	msg string
	err error
}

func (e *cleanError) Error() string { return e.msg }
func (e *cleanError) Unwrap() error { return e.err }

// remove removes the directory and everything in it through its
// descriptor (never following a link), and closes it.
func (p *pinned) remove() error {
	if p.dir == nil {
		return nil
	}
	err := p.dir.Remove()
	p.close()
	return err
}

func (p *pinned) close() {
	if p.dir != nil {
		p.dir.Close()
		p.dir = nil
	}
}
