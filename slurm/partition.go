package slurm

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Request is what a batch job asks of a partition: the part Slurm checks
// against the partition's size and limits before it lets the job start.
type Request struct {
	Partition     string // "" = the cluster's default partition
	Nodes         int    // --nodes
	NTasksPerNode int    // --ntasks-per-node; 0 = not given
	Time          string // --time in Slurm's syntax; "" = not given
}

// Partition is one partition as sinfo reports it.
type Partition struct {
	Name    string
	Default bool
	// Avail is sinfo's availability: up, down, drain or inact. Jobs start
	// only in a partition that is up.
	Avail string
	// Nodes are the partition's nodes, in sinfo's order.
	Nodes []Node
	// MinNodes and MaxNodes bound a job's node count (MaxNodes 0: no limit).
	MinNodes, MaxNodes int
	// MaxTime is the longest time limit a job may have (0: no limit).
	MaxTime time.Duration
}

// Node is one node of a partition.
type Node struct {
	Name string
	// State is sinfo's %T, as printed: idle, mixed, allocated, down*,
	// drained, idle~ (powered down), …; a trailing '*' means the node does
	// not respond.
	State string
	CPUs  int
}

// Usable reports whether jobs can start on the node now or once its
// current jobs end: it responds and is not down, drained, draining,
// failing, reserved or in maintenance. A powered-down idle node (idle~)
// counts: Slurm boots it for the job.
func (n Node) Usable() bool {
	if strings.HasSuffix(n.State, "*") {
		return false
	}
	base := strings.TrimRight(n.State, "~#!%$@^-+")
	switch base {
	case "idle", "mixed", "allocated", "completing", "planned":
		return true
	}
	return false
}

// SinfoFormat is the sinfo output format ParsePartitions reads: one line
// per node and partition (sinfo -h -a -N -o SinfoFormat).
const SinfoFormat = "%P|%a|%N|%T|%c|%s|%l"

// QueryPartitions runs sinfo (with env as its environment; nil: this
// process's) and returns every partition it reports.
func QueryPartitions(ctx context.Context, env []string) ([]Partition, error) {
	cmd := exec.CommandContext(ctx, "sinfo", "-h", "-a", "-N", "-o", SinfoFormat)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return nil, fmt.Errorf("slurm: sinfo not found: run this where Slurm's client commands are installed (a login node): %w", err)
		}
		return nil, fmt.Errorf("slurm: sinfo: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	parts, err := ParsePartitions(string(out))
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return nil, errors.New("slurm: sinfo lists no partitions: this cluster has none you can see")
	}
	return parts, nil
}

// ParsePartitions reads sinfo's output in SinfoFormat. A malformed line is
// an error naming its number.
func ParsePartitions(out string) ([]Partition, error) {
	var parts []Partition
	index := map[string]int{}
	for i, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		bad := func(what string) error {
			return fmt.Errorf("slurm: sinfo output line %d %q: %s", i+1, truncate(line), what)
		}
		f := strings.Split(line, "|")
		if len(f) != 7 {
			return nil, bad(fmt.Sprintf("%d fields, want 7 (format %s)", len(f), SinfoFormat))
		}
		name, def := strings.CutSuffix(f[0], "*")
		if name == "" || f[2] == "" || f[3] == "" {
			return nil, bad("empty partition, node or state")
		}
		cpus, err := strconv.Atoi(f[4])
		if err != nil || cpus < 0 {
			return nil, bad("CPUs " + strconv.Quote(f[4]) + " is not a count")
		}
		lo, hi, err := parseJobSize(f[5])
		if err != nil {
			return nil, bad(err.Error())
		}
		maxTime, unlimited, err := ParseTime(f[6])
		if err != nil {
			return nil, bad("time limit " + strconv.Quote(f[6]) + ": " + err.Error())
		}
		if unlimited {
			maxTime = 0
		}
		k, ok := index[name]
		if !ok {
			k = len(parts)
			index[name] = k
			parts = append(parts, Partition{Name: name, Default: def, Avail: f[1], MinNodes: lo, MaxNodes: hi, MaxTime: maxTime})
		}
		parts[k].Nodes = append(parts[k].Nodes, Node{Name: f[2], State: f[3], CPUs: cpus})
	}
	return parts, nil
}

// parseJobSize reads sinfo's %s, the job sizes in nodes a partition
// allows: "1-infinite", "2-16", "4".
func parseJobSize(s string) (lo, hi int, err error) {
	a, b, isRange := strings.Cut(s, "-")
	num := func(v string) (int, error) {
		if v == "infinite" || v == "UNLIMITED" {
			return 0, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("job size %q is not NODES or MIN-MAX", s)
		}
		return n, nil
	}
	if lo, err = num(a); err != nil {
		return 0, 0, err
	}
	if !isRange {
		return lo, lo, nil
	}
	hi, err = num(b)
	return lo, hi, err
}

// CapacityError explains why a request cannot start on its partition, in
// terms of what Slurm would do with it.
type CapacityError struct {
	Partition string
	// Reason is the pending reason squeue would show (PartitionNodeLimit,
	// PartitionTimeLimit, PartitionDown, ReqNodeNotAvail, …), or "" when
	// sbatch refuses the request at once.
	Reason string
	// Never is true when the job cannot start until the partition itself
	// changes (its size or limits): submitting it only makes it pend
	// forever. Otherwise it waits for nodes or the partition to come back.
	Never bool
	Msg   string
}

func (e *CapacityError) Error() string { return "slurm: " + e.Msg }

// Check compares a request with the partitions sinfo reported and returns
// nil when the job can start (now, or once running jobs end), else a
// *CapacityError saying why not and what to ask for instead; a bad request
// (no nodes, unparsable time) is a plain error.
func Check(parts []Partition, req Request) error {
	if req.Nodes < 1 {
		return fmt.Errorf("slurm: --nodes %d: a job needs at least one node", req.Nodes)
	}
	p, err := findPartition(parts, req.Partition)
	if err != nil {
		return err
	}
	fail := func(reason string, never bool, format string, args ...any) error {
		return &CapacityError{Partition: p.Name, Reason: reason, Never: never, Msg: fmt.Sprintf(format, args...)}
	}
	total := len(p.Nodes)
	switch {
	case req.Nodes > total:
		return fail("PartitionNodeLimit", true, "--nodes %d: partition %s has %d node%s (%s); the job would pend forever with reason PartitionNodeLimit. Ask for at most %d (sbatch -N %d), or choose a larger partition (sinfo -s)",
			req.Nodes, p.Name, total, plural(total), nodeNames(p.Nodes), total, total)
	case p.MaxNodes > 0 && req.Nodes > p.MaxNodes:
		return fail("PartitionNodeLimit", true, "--nodes %d: partition %s allows at most %d nodes per job (MaxNodes); the job would pend forever with reason PartitionNodeLimit. Ask for at most %d",
			req.Nodes, p.Name, p.MaxNodes, p.MaxNodes)
	case req.Nodes < p.MinNodes:
		return fail("PartitionNodeLimit", true, "--nodes %d: partition %s needs at least %d nodes per job (MinNodes); the job would pend forever with reason PartitionNodeLimit",
			req.Nodes, p.Name, p.MinNodes)
	}
	if req.Time != "" {
		d, unlimited, err := ParseTime(req.Time)
		if err != nil {
			return fmt.Errorf("slurm: --time %q: %w", req.Time, err)
		}
		if p.MaxTime > 0 && (unlimited || d > p.MaxTime) {
			return fail("PartitionTimeLimit", true, "--time %s: partition %s allows at most %s (MaxTime); the job would pend forever with reason PartitionTimeLimit",
				req.Time, p.Name, formatTime(p.MaxTime))
		}
	}
	// Nodes with CPUs enough for the tasks, and those of them usable now.
	var fit, usable int
	for _, n := range p.Nodes {
		if n.CPUs >= req.NTasksPerNode {
			fit++
			if n.Usable() {
				usable++
			}
		}
	}
	if fit < req.Nodes {
		return fail("", true, "--ntasks-per-node %d on %d nodes: partition %s has %d node%s with %d or more CPUs (CPUs per node: %s); sbatch refuses it (\"Requested node configuration is not available\")",
			req.NTasksPerNode, req.Nodes, p.Name, fit, plural(fit), req.NTasksPerNode, cpuCounts(p.Nodes))
	}
	if p.Avail != "up" {
		return fail("PartitionDown", false, "partition %s is %s: jobs wait (reason PartitionDown or PartitionInactive) until an administrator sets it up", p.Name, p.Avail)
	}
	if usable < req.Nodes {
		return fail("ReqNodeNotAvail", false, "--nodes %d: partition %s has %d nodes, of which %d can run jobs now (%s); the job waits until enough of them return",
			req.Nodes, p.Name, total, usable, stateCounts(p.Nodes))
	}
	return nil
}

func findPartition(parts []Partition, name string) (*Partition, error) {
	var names []string
	for i := range parts {
		p := &parts[i]
		if (name == "" && p.Default) || (name != "" && p.Name == name) {
			return p, nil
		}
		n := p.Name
		if p.Default {
			n += " (default)"
		}
		names = append(names, n)
	}
	if name == "" {
		return nil, &CapacityError{Reason: "", Never: true, Msg: fmt.Sprintf("this cluster has no default partition: name one with --partition (partitions: %s)", strings.Join(names, ", "))}
	}
	return nil, &CapacityError{Partition: name, Never: true, Msg: fmt.Sprintf("partition %s does not exist (partitions: %s); sbatch refuses it (\"invalid partition specified\")", name, strings.Join(names, ", "))}
}

// ParseTime converts a time limit in Slurm's syntax (ValidTime's forms,
// and sinfo's "infinite") to a duration; unlimited is true for
// UNLIMITED/INFINITE.
func ParseTime(s string) (d time.Duration, unlimited bool, err error) {
	switch strings.ToUpper(s) {
	case "UNLIMITED", "INFINITE":
		return 0, true, nil
	}
	if err := ValidTime(s); err != nil {
		return 0, false, err
	}
	m := timeRe.FindStringSubmatch(s)
	n := func(i int) time.Duration {
		v, _ := strconv.Atoi(m[i]) // "" (absent) is 0; ValidTime checked the digits
		return time.Duration(v)
	}
	switch {
	case m[1] != "":
		d = n(1) * time.Minute
	case m[2] != "":
		d = n(2)*time.Minute + n(3)*time.Second
	case m[4] != "":
		d = n(4)*time.Hour + n(5)*time.Minute + n(6)*time.Second
	default:
		d = n(7)*24*time.Hour + n(8)*time.Hour + n(9)*time.Minute + n(10)*time.Second
	}
	return d, false, nil
}

// formatTime writes d as Slurm does: D-HH:MM:SS or HH:MM:SS.
func formatTime(d time.Duration) string {
	s := int64(d / time.Second)
	days, s := s/86400, s%86400
	hms := fmt.Sprintf("%02d:%02d:%02d", s/3600, s%3600/60, s%60)
	if days > 0 {
		return fmt.Sprintf("%d-%s", days, hms)
	}
	return hms
}

// nodeNames lists the first few node names, for messages.
func nodeNames(nodes []Node) string {
	const show = 6
	var b strings.Builder
	for i, n := range nodes {
		if i == show {
			fmt.Fprintf(&b, ", … %d more", len(nodes)-show)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(n.Name)
	}
	return b.String()
}

// stateCounts summarises node states: "2 idle, 1 down*, 1 drained".
func stateCounts(nodes []Node) string {
	counts := map[string]int{}
	for _, n := range nodes {
		counts[n.State]++
	}
	states := make([]string, 0, len(counts))
	for s := range counts {
		states = append(states, s)
	}
	sort.Slice(states, func(i, j int) bool {
		if counts[states[i]] != counts[states[j]] {
			return counts[states[i]] > counts[states[j]]
		}
		return states[i] < states[j]
	})
	for i, s := range states {
		states[i] = fmt.Sprintf("%d %s", counts[s], s)
	}
	return strings.Join(states, ", ")
}

// cpuCounts summarises CPUs per node: "8 (x3), 4".
func cpuCounts(nodes []Node) string {
	counts := map[int]int{}
	for _, n := range nodes {
		counts[n.CPUs]++
	}
	cpus := make([]int, 0, len(counts))
	for c := range counts {
		cpus = append(cpus, c)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(cpus)))
	out := make([]string, len(cpus))
	for i, c := range cpus {
		out[i] = strconv.Itoa(c)
		if counts[c] > 1 {
			out[i] += fmt.Sprintf(" (x%d)", counts[c])
		}
	}
	return strings.Join(out, ", ")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
