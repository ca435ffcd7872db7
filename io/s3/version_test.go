package s3

import (
	"os"
	"strings"
	"testing"
)

// The recorded library version must be the one go.mod builds.
func TestSDKVersion(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	want := "\t" + library + " " + sdkVersion
	if !strings.Contains(string(mod), want) {
		t.Errorf("go.mod does not require %q: update sdkVersion", strings.TrimSpace(want))
	}
}
