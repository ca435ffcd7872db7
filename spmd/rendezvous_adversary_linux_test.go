//go:build linux

package spmd

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// The adversary of these tests is another user who can write the parent of
// a job's rendezvous directory (a plan's rendezvous = "/shared/tmp/rdv-%j",
// PRISM_RENDEZVOUS under /tmp): mid-run they rename the job directory away
// and put a symbolic link to a victim directory, or a directory of their
// own, in its place. The promise is that nothing prism did not create is
// ever created, written or removed, whatever they do, and that the ranks
// fail naming the directory instead of hanging.

const otherUID = 12345 // the adversary, for the directory of another owner

// snapshot describes every entry below dir: type and mode, owner, inode,
// size, mtime and a hash of a file's content, so that any create, write,
// rename or removal there shows.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	s := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		v := fmt.Sprintf("%v uid=%d ino=%d size=%d mtime=%d", fi.Mode(), st.Uid, st.Ino, st.Size, st.Mtim.Nano())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			v += fmt.Sprintf(" sha=%x", sha256.Sum256(b))
		}
		s[path] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func checkUntouched(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for p := range before {
			if !yield(p) {
				return
			}
		}
		for p := range after {
			if _, ok := before[p]; !ok && !yield(p) {
				return
			}
		}
	}) {
		if b, a := before[p], after[p]; a != b {
			switch {
			case a == "":
				t.Errorf("%s: %s was removed (it was %s)", what, p, b)
			case b == "":
				t.Errorf("%s: %s was created (%s)", what, p, a)
			default:
				t.Errorf("%s: %s changed: %s, now %s", what, p, b, a)
			}
		}
	}
}

// makeVictim fills dir with files named as the rendezvous names its own,
// so that a rank misled into dir would read, overwrite or remove them.
func makeVictim(t *testing.T, dir string, uid int) {
	t.Helper()
	for _, f := range []string{"precious.txt", "hb/0", "hb/1", "c/w/keep", "w/keep", "21/1", "closed.1"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("the victim's "+f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if uid < 0 {
		return
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil {
			err = os.Lchown(path, uid, uid)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRendezvousSwappedDir runs a 3-rank job whose rank 0 swaps, after a
// few collectives, the job directory or a directory below it for a link to
// a victim directory or for another user's directory, and lets the job go
// on, then closes it: the victim must be untouched, and every rank must
// fail naming the job directory, within the test's deadline.
func TestRendezvousSwappedDir(t *testing.T) {
	type swap struct {
		name   string
		mode   os.FileMode // of the job directory's parent
		loosen bool        // chmod the parent 0777 at the swap
		target string      // below the job directory; "" for itself
		other  bool        // another user's directory instead of a link
	}
	for _, sw := range []swap{
		{name: "job=link/sticky", mode: 0o777 | os.ModeSticky},
		{name: "job=other/sticky", mode: 0o777 | os.ModeSticky, other: true},
		{name: "job=link/loosened", mode: 0o755, loosen: true},
		{name: "job=other/loosened", mode: 0o755, loosen: true, other: true},
		{name: "c=link", mode: 0o755, target: commDir},
		{name: "c/w=link", mode: 0o755, target: commDir + "/" + worldID},
	} {
		t.Run(sw.name, func(t *testing.T) {
			if sw.other && os.Geteuid() != 0 {
				t.Skip("making another user's directory needs root")
			}
			base := quickDir(t)
			parent := filepath.Join(base, "shared")
			if err := os.Mkdir(parent, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(parent, sw.mode); err != nil {
				t.Fatal(err)
			}
			job := filepath.Join(parent, "job")
			victim := filepath.Join(base, "victim")
			if !sw.other {
				makeVictim(t, victim, -1)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*slack)
			defer cancel()
			// A quick heartbeat, since that is when a rank looks at the
			// path, but no quick death: on a loaded machine a live peer
			// declared dead would end the job before anyone saw the swap.
			ranks := startRanks(t, 3, RendezvousConfig{Dir: job, Token: "adv", Heartbeat: testHeartbeat,
				DeadAfter: slack, Timeout: slack})
			var before map[string]string
			doSwap := func() error {
				if sw.loosen {
					if err := os.Chmod(parent, 0o777); err != nil {
						return err
					}
				}
				at := filepath.Join(job, sw.target)
				if err := os.Rename(at, at+".moved"); err != nil {
					return err
				}
				if sw.other {
					if err := os.Mkdir(at, 0o755); err != nil {
						return err
					}
					makeVictim(t, at, otherUID)
					before = snapshot(t, at)
					return nil
				}
				before = snapshot(t, victim)
				return os.Symlink(victim, at)
			}
			errs := make([]error, len(ranks))
			var wg sync.WaitGroup
			for r, c := range ranks {
				wg.Go(func() {
					for i := 0; ; i++ {
						if r == 0 && i == 20 {
							if err := doSwap(); err != nil {
								errs[r] = fmt.Errorf("swap: %w", err)
								cancel()
								return
							}
						}
						v := []int64{int64(i)}
						if err := c.AllreduceInt64(ctx, Max, v); err != nil {
							errs[r] = err
							return
						}
						if _, err := c.Gather(ctx, 2, []byte("x")); err != nil {
							errs[r] = err
							return
						}
					}
				})
			}
			wg.Wait()
			for _, c := range ranks {
				c.Close() // fails: the communicator is out of step; removes what it may
			}
			victimDir := victim
			if sw.other {
				victimDir = filepath.Join(job, sw.target)
			}
			checkUntouched(t, "victim", before, snapshot(t, victimDir))
			for r, err := range errs {
				t.Logf("rank %d: %v", r, err)
				switch {
				case err == nil:
					t.Errorf("rank %d: no error", r)
				case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
					t.Errorf("rank %d: still running at the deadline: %v", r, err)
				case !strings.Contains(err.Error(), job):
					t.Errorf("rank %d: error %q does not name the job directory %s", r, err, job)
				case sw.target == "" && !errors.Is(err, ErrDirReplaced) &&
					!(errors.Is(err, ErrAborted) && strings.Contains(err.Error(), job+" now leads to")):
					t.Errorf("rank %d: %v; want ErrDirReplaced, or the abort notice of a rank that saw it", r, err)
				case sw.target != "" && !errors.Is(err, syscall.ELOOP):
					t.Errorf("rank %d: %v; want the link refused (ELOOP)", r, err)
				}
			}
		})
	}
}

// TestRendezvousRefusesUnsafeDir: a job directory that is a symbolic link,
// or whose parent anyone can write without the sticky bit (so anyone can
// rename the job directory), is refused before anything is made there,
// naming the directory; the link's target is left untouched.
func TestRendezvousRefusesUnsafeDir(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(base, "victim")
	makeVictim(t, victim, -1)
	link := filepath.Join(base, "link")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, victim)
	for _, tc := range []struct {
		dir, want string
	}{
		{filepath.Join(open, "rdv-7"), "sticky"},
		{filepath.Join(open, "a", "rdv-7"), "sticky"},
		{link, "symbolic link"},
	} {
		_, err := NewRendezvous(context.Background(), RendezvousConfig{Dir: tc.dir, Token: "t", Size: 1})
		if err == nil || !strings.Contains(err.Error(), tc.dir) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want a refusal naming it and saying %q", tc.dir, err, tc.want)
		}
	}
	if ents, _ := os.ReadDir(open); len(ents) != 0 {
		t.Errorf("made in the world-writable directory: %v", ents)
	}
	checkUntouched(t, "link target", before, snapshot(t, victim))
	// The sticky bit makes the same parent fine.
	if err := os.Chmod(open, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	c, err := NewRendezvous(context.Background(), RendezvousConfig{Dir: filepath.Join(open, "rdv-7"), Token: "t", Size: 1})
	if err != nil {
		t.Fatalf("in a sticky world-writable parent: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(open); len(ents) != 0 {
		t.Errorf("left in the sticky parent: %v", ents)
	}
}
