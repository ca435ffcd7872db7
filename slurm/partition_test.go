package slurm

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func loadPartitions(t *testing.T) []Partition {
	t.Helper()
	b, err := os.ReadFile("testdata/sinfo-partitions.txt")
	if err != nil {
		t.Fatal(err)
	}
	parts, err := ParsePartitions(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return parts
}

func TestParsePartitions(t *testing.T) {
	parts := loadPartitions(t)
	type want struct {
		name           string
		def            bool
		avail          string
		nodes          int
		minN, maxN     int
		maxTime        time.Duration
		usable, first8 int
	}
	wants := []want{
		{"debug", true, "up", 4, 1, 0, 0, 2, 8},
		{"gpu", false, "up", 3, 1, 2, 48 * time.Hour, 3, 64},
		{"short", false, "up", 2, 1, 0, 30 * time.Minute, 2, 8},
		{"maint", false, "down", 1, 1, 0, time.Hour, 1, 8},
	}
	if len(parts) != len(wants) {
		t.Fatalf("%d partitions: %+v", len(parts), parts)
	}
	for i, w := range wants {
		p := parts[i]
		usable := 0
		for _, n := range p.Nodes {
			if n.Usable() {
				usable++
			}
		}
		if p.Name != w.name || p.Default != w.def || p.Avail != w.avail || len(p.Nodes) != w.nodes || p.MinNodes != w.minN ||
			p.MaxNodes != w.maxN || p.MaxTime != w.maxTime || usable != w.usable || p.Nodes[0].CPUs != w.first8 {
			t.Errorf("partition %d = %+v (usable %d), want %+v", i, p, usable, w)
		}
	}
	// A node in two partitions is listed in both.
	if parts[2].Nodes[0].Name != "node1" || parts[0].Nodes[0].Name != "node1" {
		t.Errorf("node1 not in debug and short: %+v %+v", parts[0].Nodes, parts[2].Nodes)
	}
}

func TestParsePartitionsRejects(t *testing.T) {
	for _, tc := range []struct{ out, want string }{
		{"debug*|up|node1|idle|8|1-infinite\n", "line 1"},
		{"debug*|up|node1|idle|8|1-infinite|infinite\ndebug*|up|node2|idle|eight|1-infinite|infinite\n", "line 2"},
		{"debug*|up|node1|idle|8|one-infinite|infinite\n", "job size"},
		{"debug*|up|node1|idle|8|1-infinite|soon\n", "time limit"},
		{"|up|node1|idle|8|1-infinite|infinite\n", "empty partition"},
	} {
		_, err := ParsePartitions(tc.out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParsePartitions(%q) = %v, want an error mentioning %q", tc.out, err, tc.want)
		}
	}
}

func TestCheck(t *testing.T) {
	parts := loadPartitions(t)
	cases := []struct {
		name   string
		req    Request
		reason string // "" and ok: fits
		never  bool
		msg    string
		ok     bool
	}{
		{"fits the default", Request{Nodes: 2, NTasksPerNode: 8, Time: "30"}, "", false, "", true},
		{"more nodes than exist", Request{Nodes: 5}, "PartitionNodeLimit", true, "partition debug has 4 nodes (node1, node2, node3, node4)", false},
		{"beyond MaxNodes", Request{Partition: "gpu", Nodes: 3}, "PartitionNodeLimit", true, "at most 2 nodes per job", false},
		{"beyond MaxTime", Request{Partition: "short", Nodes: 1, Time: "1:00:00"}, "PartitionTimeLimit", true, "at most 00:30:00", false},
		{"unlimited beyond MaxTime", Request{Partition: "gpu", Nodes: 1, Time: "UNLIMITED"}, "PartitionTimeLimit", true, "at most 2-00:00:00", false},
		{"within MaxTime", Request{Partition: "gpu", Nodes: 2, Time: "1-12"}, "", false, "", true},
		{"tasks beyond CPUs", Request{Partition: "gpu", Nodes: 1, NTasksPerNode: 65}, "", true, "has 0 nodes with 65 or more CPUs (CPUs per node: 64 (x2), 32)", false},
		{"tasks fit some nodes", Request{Partition: "gpu", Nodes: 2, NTasksPerNode: 48}, "", false, "", true},
		{"nodes drained and down", Request{Nodes: 3}, "ReqNodeNotAvail", false, "4 nodes, of which 2 can run jobs now (1 down*, 1 drained, 1 idle, 1 mixed)", false},
		{"partition down", Request{Partition: "maint", Nodes: 1}, "PartitionDown", false, "partition maint is down", false},
		{"no such partition", Request{Partition: "bigmem", Nodes: 1}, "", true, "partitions: debug (default), gpu, short, maint", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(parts, tc.req)
			if tc.ok {
				if err != nil {
					t.Fatalf("Check(%+v) = %v, want nil", tc.req, err)
				}
				return
			}
			var ce *CapacityError
			if !errors.As(err, &ce) {
				t.Fatalf("Check(%+v) = %v, want a *CapacityError", tc.req, err)
			}
			if ce.Reason != tc.reason || ce.Never != tc.never || !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "slurm: ") {
				t.Errorf("Check(%+v) = reason %q never %v %q; want reason %q never %v, mentioning %q", tc.req, ce.Reason, ce.Never, err, tc.reason, tc.never, tc.msg)
			}
		})
	}
	noDefault := parts[1:]
	var ce *CapacityError
	if err := Check(noDefault, Request{Nodes: 1}); !errors.As(err, &ce) || !strings.Contains(err.Error(), "no default partition") {
		t.Errorf("no default partition: %v", err)
	}
	for _, req := range []Request{{Nodes: 0}, {Nodes: 1, Time: "0"}, {Nodes: 1, Time: "soon"}} {
		if err := Check(parts, req); err == nil || errors.As(err, &ce) {
			t.Errorf("Check(%+v) = %v, want a plain error for a bad request", req, err)
		}
	}
}

func TestParseTime(t *testing.T) {
	for _, tc := range []struct {
		in        string
		d         time.Duration
		unlimited bool
	}{
		{"30", 30 * time.Minute, false},
		{"30:15", 30*time.Minute + 15*time.Second, false},
		{"1:00:00", time.Hour, false},
		{"2-00:00:00", 48 * time.Hour, false},
		{"1-12", 36 * time.Hour, false},
		{"1-2:30", 26*time.Hour + 30*time.Minute, false},
		{"infinite", 0, true},
		{"UNLIMITED", 0, true},
	} {
		d, unlimited, err := ParseTime(tc.in)
		if err != nil || d != tc.d || unlimited != tc.unlimited {
			t.Errorf("ParseTime(%q) = %v %v %v, want %v %v", tc.in, d, unlimited, err, tc.d, tc.unlimited)
		}
		// What a message prints is a limit Slurm reads back as the same.
		if back, _, err := ParseTime(formatTime(d)); !unlimited && (err != nil || back != d) {
			t.Errorf("formatTime(%v) = %q, which parses as %v (%v)", d, formatTime(d), back, err)
		}
	}
	if _, _, err := ParseTime("1:60:00"); err == nil {
		t.Error("1:60:00 parsed")
	}
}

// TestExampleFitsOneNode: examples/prism.sbatch as it stands (its #SBATCH
// defaults, no command-line options) can start on the one-node test
// cluster of cluster.sh (localhost, 8 CPUs) instead of pending forever.
func TestExampleFitsOneNode(t *testing.T) {
	b, err := os.ReadFile("../examples/prism.sbatch")
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Nodes: 1}
	for _, line := range strings.Split(string(b), "\n") {
		opt, ok := strings.CutPrefix(line, "#SBATCH --")
		if !ok {
			continue
		}
		k, v, _ := strings.Cut(strings.Fields(opt)[0], "=")
		var n int
		switch k {
		case "nodes", "ntasks-per-node":
			if n, err = strconv.Atoi(v); err != nil {
				t.Fatalf("#SBATCH --%s=%s: %v", k, v, err)
			}
		}
		switch k {
		case "nodes":
			req.Nodes = n
		case "ntasks-per-node":
			req.NTasksPerNode = n
		case "time":
			req.Time = v
		case "partition":
			req.Partition = v
		}
	}
	oneNode, err := ParsePartitions("debug*|up|localhost|idle|8|1-infinite|infinite\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(oneNode, req); err != nil {
		t.Errorf("examples/prism.sbatch asks for %+v: %v", req, err)
	}
}
