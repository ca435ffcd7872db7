package s3test

import (
	"os"
	"testing"
)

// TestBinary builds (or finds) the VersityGW binary. make test runs it on
// its own before the other packages, so the one build from the module
// proxy (minutes on a cold cache) happens under its own timeout, not
// inside the first S3 test's.
func TestBinary(t *testing.T) {
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(bin)
	if err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("%s: %v, mode %v: not an executable", bin, err, fi.Mode())
	}
}
