package s3

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// MarkerName is the object that marks a run's prefix as prism's.
const MarkerName = ".prism-run"

// Run is prism's promise for a bucket, the same as for a POSIX workdir: a
// run writes only under <base>/prism-<run-id>/, marks that prefix with a
// marker object holding the run id, and its Cleanup deletes only the keys
// the run recorded writing, after checking that the marker is still its
// own. Objects that were there before, under the base or inside the run's
// prefix, survive.
type Run struct {
	c      *Client
	id     string
	prefix string // "<base>/prism-<id>/"
	mu     sync.Mutex
	keys   map[string]struct{}
	// gone are the recorded keys deleted since (Release, or the caller's
	// own delete and Forget): what sweepLate looks for again.
	gone map[string]struct{}
}

// StartRun checks the run id, refuses a prefix that already has a marker
// (another run, or this one started twice), and writes the marker.
func (c *Client) StartRun(ctx context.Context, base, runID string) (*Run, error) {
	r, err := c.newRun(base, runID)
	if err != nil {
		return nil, err
	}
	marker := r.prefix + MarkerName
	switch owner, err := r.markerOwner(ctx); {
	case err == nil:
		return nil, fmt.Errorf("s3: s3://%s/%s already exists (run %q): refusing to start run %q in a prefix that is already marked", c.bucket, marker, owner, runID)
	case !IsNotFound(err):
		return nil, err
	}
	if err := c.Put(ctx, marker, []byte(runID)); err != nil {
		return nil, err
	}
	return r, nil
}

// JoinRun returns the Run of runID under base that another process (rank 0
// of the job) started with StartRun: its marker must exist and name runID.
// A joined Run tracks the keys this process writes; Release deletes them
// and leaves the marker to the Run that wrote it.
func (c *Client) JoinRun(ctx context.Context, base, runID string) (*Run, error) {
	r, err := c.newRun(base, runID)
	if err != nil {
		return nil, err
	}
	if err := r.checkMarker(ctx, "join"); err != nil {
		return nil, err
	}
	return r, nil
}

// newRun is the Run of runID under base, checked, with nothing written.
func (c *Client) newRun(base, runID string) (*Run, error) {
	if err := checkRunID(runID); err != nil {
		return nil, err
	}
	base, err := cleanPrefix(base)
	if err != nil {
		return nil, fmt.Errorf("s3: run prefix: %w", err)
	}
	return &Run{c: c, id: runID, prefix: base + "prism-" + runID + "/", keys: map[string]struct{}{}}, nil
}

// checkRunID keeps run ids to one safe key component.
func checkRunID(id string) error {
	if id == "" || len(id) > 128 {
		return fmt.Errorf("s3: run id %q: want 1 to 128 characters", id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(alnum(c) || c >= 'A' && c <= 'Z' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("s3: run id %q: character %q not allowed (letters, digits, '-', '_', '.')", id, c)
		}
	}
	if id == "." || id == ".." {
		return fmt.Errorf("s3: run id %q not allowed", id)
	}
	return nil
}

// ID is the run id.
func (r *Run) ID() string { return r.id }

// Prefix is "<base>/prism-<run-id>/", the only place the run writes.
func (r *Run) Prefix() string { return r.prefix }

// Key returns the full key for name inside the run's prefix, refusing
// names that would leave it or overwrite the marker. It records nothing:
// call Track once the object is written.
func (r *Run) Key(name string) (string, error) {
	if err := checkKeyPath(name); err != nil {
		return "", fmt.Errorf("s3: run %s: name %q: %w", r.id, name, err)
	}
	if name == MarkerName {
		return "", fmt.Errorf("s3: run %s: name %q is the run marker", r.id, name)
	}
	return r.prefix + name, nil
}

// Track records keys written by other means (a timed loop calling
// Client.Put with keys from Key) so Cleanup deletes them. Keys outside the
// run's prefix are refused.
func (r *Run) Track(keys ...string) error {
	for _, k := range keys {
		name, ok := strings.CutPrefix(k, r.prefix)
		if !ok {
			return fmt.Errorf("s3: run %s: key %q is outside the run's prefix %s", r.id, k, r.prefix)
		}
		if _, err := r.Key(name); err != nil {
			return err
		}
	}
	r.mu.Lock()
	for _, k := range keys {
		r.keys[k] = struct{}{}
	}
	r.mu.Unlock()
	return nil
}

// Put writes name inside the run's prefix and records it.
func (r *Run) Put(ctx context.Context, name string, body []byte) error {
	key, err := r.Key(name)
	if err != nil {
		return err
	}
	// Recorded before the request: a PUT that failed on the client side
	// may still have landed, and deleting a missing key is harmless.
	if err := r.Track(key); err != nil {
		return err
	}
	return r.c.Put(ctx, key, body)
}

// Keys returns the keys recorded so far, unordered.
func (r *Run) Keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ks := make([]string, 0, len(r.keys))
	for k := range r.keys {
		ks = append(ks, k)
	}
	return ks
}

// markerOwner reads the marker and returns the run id it holds.
func (r *Run) markerOwner(ctx context.Context) (string, error) {
	buf := make([]byte, 256)
	n, err := r.c.Get(ctx, r.prefix+MarkerName, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// Check fails unless the run's marker exists and names this run: what a
// caller deleting the run's keys by other means (a phase's own teardown)
// checks first.
func (r *Run) Check(ctx context.Context) error { return r.checkMarker(ctx, "cleanup") }

// checkMarker fails unless the run's marker exists and names this run.
func (r *Run) checkMarker(ctx context.Context, what string) error {
	marker := r.prefix + MarkerName
	owner, err := r.markerOwner(ctx)
	if IsNotFound(err) {
		return fmt.Errorf("s3: %s of run %s: marker s3://%s/%s is missing; refusing to delete anything under %s", what, r.id, r.c.bucket, marker, r.prefix)
	}
	if err != nil {
		return fmt.Errorf("s3: %s of run %s: reading the marker: %w", what, r.id, err)
	}
	if owner != r.id {
		return fmt.Errorf("s3: %s of run %s: marker s3://%s/%s names run %q; refusing to delete anything under %s", what, r.id, r.c.bucket, marker, owner, r.prefix)
	}
	return nil
}

// Release deletes the recorded keys, after checking that the marker is
// still this run's, and leaves the marker: what every process of a job
// does before the one that marked the prefix removes the marker (Cleanup).
func (r *Run) Release(ctx context.Context) error {
	if err := r.checkMarker(ctx, "cleanup"); err != nil {
		return err
	}
	keys := r.Keys()
	for len(keys) > 0 {
		batch := keys[:min(len(keys), MaxBatch)]
		kerrs, err := r.c.DeleteBatch(ctx, batch)
		if err != nil {
			return fmt.Errorf("s3: cleanup of run %s: %w", r.id, err)
		}
		if len(kerrs) > 0 {
			return fmt.Errorf("s3: cleanup of run %s: %d of %d keys not deleted, first %w", r.id, len(kerrs), len(batch), kerrs[0])
		}
		r.Forget(batch...)
		keys = keys[len(batch):]
	}
	return r.sweepLate(ctx)
}

// sweepLate deletes again the deleted keys (gone) that still show under
// the run's prefix: a write the client gave up on (a cancelled step) can
// land on the server after its delete. Only when such a write happened
// (the client is unsettled), it looks five times, 200 ms apart, and
// deletes only keys this run recorded, never another's object in its
// prefix.
func (r *Run) sweepLate(ctx context.Context) error {
	if !r.c.unsettled.Load() {
		return nil
	}
	r.mu.Lock()
	mine := make(map[string]bool, len(r.gone))
	for k := range r.gone {
		mine[k] = true
	}
	r.mu.Unlock()
	if len(mine) == 0 {
		return nil
	}
	// A multipart upload of a recorded key whose create or abort the client
	// gave up on holds parts on the server: abort it too.
	if err := r.c.AbortUploads(ctx, r.prefix, func(k string) bool { return mine[k] }); err != nil {
		return fmt.Errorf("s3: cleanup of run %s: %w", r.id, err)
	}
	for range 5 {
		time.Sleep(200 * time.Millisecond)
		var late []string
		for token := ""; ; {
			page, err := r.c.List(ctx, r.prefix, MaxBatch, token)
			if err != nil {
				return fmt.Errorf("s3: cleanup of run %s: %w", r.id, err)
			}
			for _, o := range page.Objects {
				if mine[o.Key] {
					late = append(late, o.Key)
				}
			}
			if token = page.Next; token == "" {
				break
			}
		}
		for len(late) > 0 {
			batch := late[:min(len(late), MaxBatch)]
			if _, err := r.c.DeleteBatch(ctx, batch); err != nil {
				return fmt.Errorf("s3: cleanup of run %s: %w", r.id, err)
			}
			late = late[len(batch):]
		}
	}
	return nil
}

// Forget drops keys from the record once the caller deleted them itself
// (a phase's Teardown, an s3_delete run), so Release does not send them
// again.
func (r *Run) Forget(keys ...string) {
	r.mu.Lock()
	if r.gone == nil {
		r.gone = map[string]struct{}{}
	}
	for _, k := range keys {
		delete(r.keys, k)
		r.gone[k] = struct{}{}
	}
	r.mu.Unlock()
}

// Cleanup deletes the recorded keys and then the marker. It refuses, and
// deletes nothing, when the marker is gone or names another run while
// keys are recorded: then the prefix is no longer provably this run's.
//
// With nothing recorded (any more) and the marker already gone there is
// nothing to refuse: the marker was removed by another process that marked
// the same run's prefix at the same time (two phases of one job starting
// side by side), and Cleanup returns nil.
func (r *Run) Cleanup(ctx context.Context) error {
	if len(r.Keys()) > 0 {
		if err := r.Release(ctx); err != nil {
			return err
		}
	} else if err := r.checkMarker(ctx, "cleanup"); err == nil {
		// The phases deleted their keys themselves: what a cancelled
		// write left landing after them is still this run's to delete.
		if err := r.sweepLate(ctx); err != nil {
			return err
		}
	}
	marker := r.prefix + MarkerName
	owner, err := r.markerOwner(ctx)
	switch {
	case IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("s3: cleanup of run %s: reading the marker: %w", r.id, err)
	case owner != r.id:
		return fmt.Errorf("s3: cleanup of run %s: marker s3://%s/%s names run %q; refusing to delete it", r.id, r.c.bucket, marker, owner)
	}
	// The other phase of a group, which marked the same run's prefix, may
	// delete the marker between the read and this delete; some servers
	// (VersityGW) then answer 404 where S3 answers 204.
	if err := r.c.Delete(ctx, marker); err != nil && !IsNotFound(err) {
		return fmt.Errorf("s3: cleanup of run %s: %w", r.id, err)
	}
	return nil
}
