package torchtest

import "testing"

// A missing oracle fails only where make test or CI asks for it.
func TestRequired(t *testing.T) {
	for _, c := range []struct {
		ci, req string
		want    bool
	}{{"", "", false}, {"true", "", true}, {"", "1", true}, {"false", "0", false}} {
		t.Setenv("CI", c.ci)
		t.Setenv("PRISM_REQUIRE_TORCH", c.req)
		if got := Required(); got != c.want {
			t.Errorf("CI=%q PRISM_REQUIRE_TORCH=%q: Required %v, want %v", c.ci, c.req, got, c.want)
		}
	}
}
