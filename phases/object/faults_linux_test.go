package object

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prism-hpc/prism/io/s3/s3test"
	"github.com/prism-hpc/prism/phases/phasestest"
	"github.com/prism-hpc/prism/report"
)

// An endpoint whose SYNs go unanswered: the phase fails once the plan's
// s3_connect_timeout has passed, saying so and naming the endpoint, not at
// the test's timeout.
func TestUnreachableEndpoint(t *testing.T) {
	ep := "http://" + s3test.Blackhole(t)
	s3test.ServerEnv(t)
	plan := fmt.Sprintf("[plan]\ndrop_caches = \"none\"\nstorage = \"s3://nowhere/\"\ns3_endpoint = %q\ns3_connect_timeout = \"1s\"\n[[phase]]\nkind = \"s3_put\"\ncount = 5\n", ep)
	res := phasestest.Run(t, registry(), plan)
	ph := res.Phase(t, "s3_put")
	t.Log(ph.Error)
	if ph.Status != report.StatusFailed || !strings.Contains(ph.Error, ep) || !strings.Contains(ph.Error, "connect_timeout") {
		t.Errorf("status %s, error %q; want a connect timeout naming %s", ph.Status, ph.Error, ep)
	}
	// A liveness bound, generous for a loaded machine: without the connect
	// timeout the kernel's SYN retries take minutes.
	if res.Elapsed > 30*time.Second {
		t.Errorf("the run took %v with a 1s connect timeout", res.Elapsed)
	}
}
