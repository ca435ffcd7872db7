package s3_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	ps3 "github.com/prism-hpc/prism/io/s3"
)

func exists(t *testing.T, c *ps3.Client, key string) bool {
	t.Helper()
	_, err := c.Head(context.Background(), key)
	if err != nil && !ps3.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

func TestRunCleanup(t *testing.T) {
	ctx := context.Background()
	_, c := server(t, ps3.Config{})
	// Objects that were there first: beside the run, and inside its prefix.
	for _, k := range []string{"base/keep", "base/prism-r1/stray", "base/prism-r1x/other"} {
		if err := c.Put(ctx, k, []byte("not prism's")); err != nil {
			t.Fatal(err)
		}
	}
	r, err := c.StartRun(ctx, "base", "r1")
	if err != nil {
		t.Fatal(err)
	}
	if r.Prefix() != "base/prism-r1/" {
		t.Fatalf("prefix %q", r.Prefix())
	}
	buf := make([]byte, 16)
	if n, err := c.Get(ctx, "base/prism-r1/.prism-run", buf); err != nil || string(buf[:n]) != "r1" {
		t.Fatalf("marker = %q, %v; want the run id", buf[:n], err)
	}
	for _, name := range []string{"a", "dir/b"} {
		if err := r.Put(ctx, name, []byte(name)); err != nil {
			t.Fatal(err)
		}
	}
	// Written through the client, then tracked, as a timed loop does.
	k, err := r.Key("loop/c")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, k, []byte("c")); err != nil {
		t.Fatal(err)
	}
	if err := r.Track(k); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"../escape", "a/../../b", "", ".prism-run", "a//b"} {
		if _, err := r.Key(bad); err == nil {
			t.Errorf("Key(%q) accepted", bad)
		}
	}
	if err := r.Track("base/keep"); err == nil || !strings.Contains(err.Error(), "outside the run's prefix") {
		t.Errorf("Track of a key outside the prefix: %v", err)
	}
	if err := r.Track("base/prism-r1/../keep"); err == nil {
		t.Error("Track of a key climbing out of the prefix accepted")
	}
	if got, want := sorted(r.Keys()), []string{"base/prism-r1/a", "base/prism-r1/dir/b", "base/prism-r1/loop/c"}; !slices.Equal(got, want) {
		t.Errorf("Keys() = %v, want %v", got, want)
	}
	// A second run in the same prefix is refused while the marker stands.
	if _, err := c.StartRun(ctx, "base", "r1"); err == nil || !strings.Contains(err.Error(), "already") {
		t.Errorf("a second StartRun on a marked prefix: %v", err)
	}
	if err := r.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"base/prism-r1/a", "base/prism-r1/dir/b", "base/prism-r1/loop/c", "base/prism-r1/.prism-run"} {
		if exists(t, c, k) {
			t.Errorf("%s survived Cleanup", k)
		}
	}
	for _, k := range []string{"base/keep", "base/prism-r1/stray", "base/prism-r1x/other"} {
		if !exists(t, c, k) {
			t.Errorf("%s, which the run did not write, was deleted", k)
		}
	}
}

func TestRunCleanupRefuses(t *testing.T) {
	ctx := context.Background()
	_, c := server(t, ps3.Config{})
	r, err := c.StartRun(ctx, "", "r2")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Put(ctx, "data", []byte("d")); err != nil {
		t.Fatal(err)
	}
	// Another run's marker in its place: nothing is deleted.
	if err := c.Put(ctx, "prism-r2/.prism-run", []byte("intruder")); err != nil {
		t.Fatal(err)
	}
	err = r.Cleanup(ctx)
	if err == nil || !strings.Contains(err.Error(), `names run "intruder"`) || !strings.Contains(err.Error(), "refusing") {
		t.Errorf("Cleanup under a foreign marker: %v", err)
	}
	if !exists(t, c, "prism-r2/data") || !exists(t, c, "prism-r2/.prism-run") {
		t.Error("Cleanup under a foreign marker deleted something")
	}
	// No marker at all: refused too.
	if err := c.Delete(ctx, "prism-r2/.prism-run"); err != nil {
		t.Fatal(err)
	}
	if err := r.Cleanup(ctx); err == nil || !strings.Contains(err.Error(), "marker") || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Cleanup without a marker: %v", err)
	}
	if !exists(t, c, "prism-r2/data") {
		t.Error("Cleanup without a marker deleted the run's data")
	}
	// Nothing recorded and no marker (a concurrent owner removed it):
	// nothing to refuse.
	r.Forget(r.Keys()...)
	if err := r.Cleanup(ctx); err != nil {
		t.Errorf("Cleanup of nothing without a marker: %v", err)
	}
	for _, id := range []string{"", "a/b", "..", "run id"} {
		if _, err := c.StartRun(ctx, "", id); err == nil {
			t.Errorf("StartRun with run id %q accepted", id)
		}
	}
	if _, err := c.StartRun(ctx, "../up", "r3"); err == nil {
		t.Error("StartRun under ../up accepted")
	}
}

func sorted(s []string) []string { slices.Sort(s); return s }
