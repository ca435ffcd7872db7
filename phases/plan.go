package phases

import (
	"bufio"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/BurntSushi/toml"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/report"
)

// Plan is a decoded, validated plan.
type Plan struct {
	File   string // as given, for messages
	Source []byte // the TOML text, recorded so every rank decodes the same
	Header Header
	Phases []*Spec
}

// Header is the [plan] table.
type Header struct {
	Name    string `toml:"name" doc:"plan name; results go to <results>/<name>/"`
	Workdir string `toml:"workdir" doc:"where prism creates prism-<run-id>/ (relative to the current directory)"`
	// NodeLocalWorkdir is a workdir on each node's own storage.
	NodeLocalWorkdir string `toml:"node_local_workdir" doc:"a workdir on each node's own storage (local NVMe, /tmp): the first rank of every host makes its own prism-<run-id>/ there and removes it; results still go to rank 0; instead of workdir"`
	Results          string `toml:"results" doc:"where manifests go"`
	DropCaches       string `toml:"drop_caches" doc:"auto | root | fadvise | none: cache policy between setup and the timed run"`
	Keep             bool   `toml:"keep" doc:"leave the run directory in place after the run"`
	// MaxMemory bounds the memory a phase may plan to use per rank.
	MaxMemory Size `toml:"max_memory" doc:"most memory a phase may need per rank (its estimate: histograms per worker, prepared names, buffers, model tensors); 0 = half of each host's memory shared by its ranks; a plan over it is refused before it runs"`
	// AllowSharedWorkdir lets a workdir others can write (group- or
	// world-writable without the sticky bit) through, with a warning.
	AllowSharedWorkdir bool   `toml:"allow_shared_workdir" doc:"run in a workdir others can write without the sticky bit (any of them could swap prism's run directory); prism then warns"`
	Clock              string `toml:"clock" doc:"auto | tsc | os: the clock timed loops read between ops (auto: the CPU's TSC when it is invariant and in step on every CPU, as fio does; else the OS clock)"`
	Rendezvous         string `toml:"rendezvous" doc:"shared directory for rank coordination without MPI (or PRISM_RENDEZVOUS); one job per directory: %j becomes the job token (SLURM_JOB_ID.SLURM_STEP_ID, or PRISM_RENDEZVOUS_TOKEN), and a rank of another job is refused"`
	// AllowMixedFS lets ranks that see different filesystems under the
	// workdir run (node-local scratch on purpose), with a warning.
	AllowMixedFS bool `toml:"allow_mixed_fs" doc:"run although ranks see different filesystems under the workdir (type, mount source, or fs id on one host); otherwise the run stops before the first phase"`
	// StragglerTolerance is the balance rule of the flags.
	StragglerTolerance float64 `toml:"straggler_tolerance" doc:"flag ranks (and hosts) whose bytes or ops fall this fraction below the median, or whose busy time is this fraction above it"`
	// CoordinationTimeout bounds every wait for other ranks.
	CoordinationTimeout Duration `toml:"coordination_timeout" doc:"longest wait for another rank at a barrier before failing"`
	StallAfter          Duration `toml:"stall_after" doc:"report any single op in flight longer than this, while it is stuck (0 = off)"`
	OpTimeout           Duration `toml:"op_timeout" doc:"fail the phase when a single op runs longer than this (0 = wait forever)"`
	// StorageOptions are the object storage every phase that can use it
	// runs over (storage = "s3://…"), and its client settings.
	StorageOptions
	// KBBase is what K, KB, M, MB ... mean in the plan's sizes, as fio's
	// kb_base.
	KBBase int `toml:"kb_base" doc:"1024 | 1000: the base of K, KB, M, MB, G, GB, T, TB in every size of the plan, as fio's kb_base (1024: \"4KB\" = \"4K\" = 4096 bytes, fio's default; 1000: \"4KB\" = 4000); KiB, MiB, GiB, TiB (or Ki, Mi ...) are always 1024-based"`
	// MLPerf is the MLPerf Storage submission mode the plan is meant for
	// (prism mlperf, cmd_mlperf.go): closed refuses what the rules fix.
	MLPerf string `toml:"mlperf" doc:"\"\" | closed | open: the MLPerf Storage mode for prism mlperf: closed refuses parameters the rules do not let change (naming the rule and the allowed value), open records every change in the procedure's metadata; prism run ignores it"`
}

// DefaultHeader is the [plan] table of a plan that sets none of its keys;
// `prism list` prints these defaults.
func DefaultHeader() Header {
	return Header{Results: "results", DropCaches: "auto", Clock: "auto", KBBase: DefaultKBBase, CoordinationTimeout: Duration(defaultCoordinationTimeout), StallAfter: Duration(defaultStallAfter), StragglerTolerance: report.DefaultStragglerTolerance}
}

// Common holds the keys every [[phase]] accepts besides its kind's own.
type Common struct {
	Kind       string    `toml:"kind" doc:"phase kind (see prism list)"`
	Name       string    `toml:"name" doc:"name in reports (default: kind, numbered when repeated)"`
	Iterations int       `toml:"iterations" doc:"measured repetitions"`
	Warmup     int       `toml:"warmup" doc:"repetitions run first and excluded from statistics"`
	Ranks      RankSel   `toml:"ranks" doc:"run on the first k ranks, or a sweep [1, 2, 4]; default all"`
	Nodes      RankSel   `toml:"nodes" doc:"run on the ranks of the first k hosts (ranks grouped by host, whatever order the launcher numbered them in), or a node sweep [1, 2, 4]; instead of ranks"`
	Group      string    `toml:"group" doc:"run this phase (on its first ranks = k) at the same time as the next phase, which gets the ranks after them"`
	DropCaches string    `toml:"drop_caches" doc:"override of [plan] drop_caches for this phase"`
	StallAfter *Duration `toml:"stall_after" doc:"override of [plan] stall_after"`
	OpTimeout  *Duration `toml:"op_timeout" doc:"override of [plan] op_timeout"`
	Expect     *Expect   `toml:"expect" doc:"[phase.expect] thresholds; a miss fails the run (exit 1)"`
}

// Expect are a phase's acceptance thresholds.
type Expect struct {
	P50          *Duration `toml:"p50" doc:"median latency at most"`
	P90          *Duration `toml:"p90" doc:"p90 latency at most"`
	P99          *Duration `toml:"p99" doc:"p99 latency at most"`
	Max          *Duration `toml:"max" doc:"worst latency at most"`
	Mean         *Duration `toml:"mean" doc:"mean latency at most"`
	MinBandwidth *Rate     `toml:"min_bandwidth" doc:"aggregate bandwidth at least, e.g. \"1GiB/s\""`
	MinIOPS      *float64  `toml:"min_iops" doc:"aggregate ops per second at least"`
	MaxErrors    *int64    `toml:"max_errors" doc:"failed ops at most"`
	MinAU        *float64  `toml:"min_au" doc:"train: accelerator utilisation (au_percent) at least, in percent (replaces the preset's au_threshold as the verdict; min_au = 0 relaxes it)"`
	// Ops are the per-op thresholds of [phase.expect.<op>] sub-tables
	// (e.g. [phase.expect.write] p99 = "20ms"), checked against that op
	// type's figures alone.
	Ops map[string]*Expect `toml:"-"`
}

// Rate is a bandwidth such as "1GiB/s" or "500MB/s".
type Rate float64

// UnmarshalText parses "<size>/s".
func (r *Rate) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if !strings.HasSuffix(s, "/s") {
		return fmt.Errorf("bad bandwidth %q: write e.g. \"1GiB/s\"", s)
	}
	v, err := ParseSize(strings.TrimSuffix(s, "/s"))
	if err != nil {
		return fmt.Errorf("bad bandwidth %q: %v", s, err)
	}
	*r = Rate(v)
	return nil
}

// MarshalText writes "<size>/s".
func (r Rate) MarshalText() ([]byte, error) { return []byte(Size(r).String() + "/s"), nil }

// RankSel is a phase's rank selection: nil (all ranks), one count, or a
// sweep of increasing counts.
type RankSel []int

// UnmarshalTOML accepts an integer or an array of integers.
func (r *RankSel) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		*r = RankSel{int(x)}
	case []any:
		if len(x) == 0 {
			return errors.New("empty list")
		}
		out := make(RankSel, 0, len(x))
		for _, e := range x {
			n, ok := e.(int64)
			if !ok {
				return fmt.Errorf("list holds %T, want integers", e)
			}
			out = append(out, int(n))
		}
		*r = out
	default:
		return fmt.Errorf("want an integer or an array of integers, not %T", v)
	}
	for i, n := range *r {
		if n < 1 || n > 1<<24 {
			return fmt.Errorf("count %d out of range (1 .. 16777216)", n)
		}
		if i > 0 && n <= (*r)[i-1] {
			return fmt.Errorf("a sweep must increase: %v", []int(*r))
		}
	}
	return nil
}

// Spec is one [[phase]] of a plan, decoded.
type Spec struct {
	Common
	Index int // 0-based position in the plan
	Line  int // line of its [[phase]] header
	Phase Phase
	Info  Kind
	// raw is the [[phase]] table as written, for the written form of the
	// sizes and durations the manifest records (see ParamValues).
	raw    map[string]any
	kbBase int // the plan's kb_base, which raw's sizes were read with
	// plan is the plan the spec belongs to (nil for one built by hand):
	// the phases before it and the [plan] storage keys it inherits.
	plan *Plan
	// startOps is the phase's ExpectedOps as read before its first Setup
	// (0: not read yet; -1: none), which the start line of every instance shows:
	// before Setup only a count the plan fixes is there, the same on every
	// rank, while one Setup works out (a checkpoint's planned calls, a
	// dataset's share of files) would still be the previous sweep size's
	// rank 0's at the next size's start line.
	startOps int64
}

// Before is the phases of the plan before s (what a Resolver gets).
func (s *Spec) Before() []*Spec {
	if s.plan == nil || s.Index > len(s.plan.Phases) {
		return nil
	}
	return s.plan.Phases[:s.Index]
}

// Resolution is the phase's Resolved (empty for a phase that resolves
// nothing).
func (s *Spec) Resolution() Resolved {
	if r, ok := s.Phase.(Resolver); ok {
		return r.Resolve(s.Before())
	}
	return Resolved{}
}

// Footprint is what one rank of the phase writes at ranks ranks, with its
// inherited inputs resolved; ok is false when the phase cannot say.
func (s *Spec) Footprint(ranks int) (f Footprint, ok bool) {
	if r := s.Resolution(); r.Footprint != nil {
		return r.Footprint(ranks), true
	}
	if fp, ok := s.Phase.(Footprinter); ok {
		return fp.Footprint(ranks), true
	}
	return Footprint{}, false
}

// PlanError is a plan problem with its place in the file.
type PlanError struct {
	File  string
	Line  int
	Col   int
	Phase int    // 1-based [[phase]] number, 0 outside phases
	Kind  string // the phase's kind, when known
	Key   string
	Msg   string
}

func (e *PlanError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Col > 0 {
			fmt.Fprintf(&b, ":%d", e.Col)
		}
	}
	b.WriteString(": ")
	if e.Phase > 0 {
		fmt.Fprintf(&b, "phase %d", e.Phase)
		if e.Kind != "" {
			fmt.Fprintf(&b, " (%s)", e.Kind)
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		fmt.Fprintf(&b, "%s: ", e.Key)
	}
	b.WriteString(clipMessage(e.Msg))
	return b.String()
}

// maxMessage bounds a plan error's message: a message quotes the value it
// refuses, and a 15 MB plan name would otherwise be printed whole.
const maxMessage = 4096

// clipMessage keeps the start and the end of an over-long message (the
// end usually says what to do), and says how much it left out.
func clipMessage(m string) string {
	if len(m) <= maxMessage {
		return m
	}
	head, tail := maxMessage/2, maxMessage/4
	for head > 0 && !utf8.RuneStart(m[head]) {
		head--
	}
	cut := len(m) - tail
	for cut < len(m) && !utf8.RuneStart(m[cut]) {
		cut++
	}
	return fmt.Sprintf("%s … (%d bytes left out) … %s", m[:head], cut-head, m[cut:])
}

// Cache policies a plan can ask for.
var cachePolicies = []string{"auto", "root", "fadvise", "none"}

// LoadPlan reads and decodes a plan file.
func LoadPlan(reg *Registry, path string) (*Plan, error) {
	b, err := pio.ReadInput(path, pio.MaxInput, pio.InputTimeout)
	if err != nil {
		return nil, &PlanError{File: path, Msg: strings.TrimPrefix(err.Error(), path+": ")}
	}
	return DecodePlan(reg, path, b)
}

// DecodePlan decodes plan text strictly: unknown keys, wrong types, bad
// units, out-of-range values and unknown kinds are *PlanError values that
// name the file, line, column and key.
func DecodePlan(reg *Registry, file string, src []byte) (*Plan, error) {
	if len(src) > pio.MaxInput {
		return nil, &PlanError{File: file, Msg: fmt.Sprintf("%d bytes: a plan is at most %d bytes", len(src), pio.MaxInput)}
	}
	if line, err := checkNesting(src); err != nil {
		return nil, &PlanError{File: file, Line: line, Msg: err.Error()}
	}
	loc := newLocator(src)
	var raw map[string]any
	_, err := toml.Decode(string(src), &raw)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &PlanError{File: file, Line: pe.Position.Line, Col: pe.Position.Col, Msg: strings.TrimPrefix(pe.Message, "toml: ")}
		}
		return nil, &PlanError{File: file, Msg: err.Error()}
	}
	p := &Plan{File: file, Source: src, Header: DefaultHeader()}
	kbBase := DefaultKBBase
	for key := range raw {
		if key != "plan" && key != "phase" {
			line, col := loc.find(-1, "", key)
			return nil, &PlanError{File: file, Line: line, Col: col, Key: key, Msg: "unknown top-level key (allowed: [plan], [[phase]])"}
		}
	}
	if hdr, ok := raw["plan"]; ok {
		m, ok := hdr.(map[string]any)
		if !ok {
			line, col := loc.find(-1, "", "plan")
			return nil, &PlanError{File: file, Line: line, Col: col, Key: "plan", Msg: "must be a table: [plan]"}
		}
		// kb_base first: it says what the sizes of [plan] (max_memory)
		// and of every phase mean.
		if kbBase, err = headerKBBase(m); err != nil {
			line, col := loc.find(-1, "plan", "kb_base")
			return nil, &PlanError{File: file, Line: line, Col: col, Key: "plan.kb_base", Msg: err.Error()}
		}
		if err := decodeTable(m, &p.Header, func(key string) (int, int) { return loc.find(-1, "plan", key) }, file, "plan.", kbBase); err != nil {
			return nil, err
		}
		if !slices.Contains(cachePolicies, p.Header.DropCaches) {
			line, col := loc.find(-1, "plan", "drop_caches")
			return nil, &PlanError{File: file, Line: line, Col: col, Key: "plan.drop_caches", Msg: fmt.Sprintf("unknown policy %q (allowed: %s)", p.Header.DropCaches, strings.Join(cachePolicies, ", "))}
		}
		if m := p.Header.MLPerf; m != "" && m != "closed" && m != "open" {
			line, col := loc.find(-1, "plan", "mlperf")
			return nil, &PlanError{File: file, Line: line, Col: col, Key: "plan.mlperf", Msg: fmt.Sprintf("unknown mode %q (allowed: closed, open)", m)}
		}
		if t := p.Header.StragglerTolerance; !(t > 0 && t < 1) {
			line, col := loc.find(-1, "plan", "straggler_tolerance")
			return nil, &PlanError{File: file, Line: line, Col: col, Key: "plan.straggler_tolerance", Msg: fmt.Sprintf("%v out of range (a fraction above 0 and below 1, e.g. 0.2)", t)}
		}
		if !slices.Contains(report.ClockModes, p.Header.Clock) {
			line, col := loc.find(-1, "plan", "clock")
			return nil, &PlanError{File: file, Line: line, Col: col, Key: "plan.clock", Msg: fmt.Sprintf("unknown clock %q (allowed: %s)", p.Header.Clock, strings.Join(report.ClockModes, ", "))}
		}
	}
	if err := p.Header.StorageOptions.Validate(); err != nil {
		ke := err.(*KeyError)
		line, col := loc.find(-1, "plan", ke.Key)
		return nil, &PlanError{File: file, Line: line, Col: col, Key: "plan." + ke.Key, Msg: ke.Msg}
	}
	if p.Header.Name == "" {
		p.Header.Name = "plan"
	}
	if !isSafeName(p.Header.Name) {
		line, col := loc.find(-1, "plan", "name")
		return nil, &PlanError{File: file, Line: line, Col: col, Key: "plan.name", Msg: fmt.Sprintf("%q: use letters, digits, '.', '_' and '-' (it names a results directory)", p.Header.Name)}
	}
	phasesRaw, ok := raw["phase"]
	if !ok {
		return nil, &PlanError{File: file, Msg: "the plan has no [[phase]] tables: nothing to run"}
	}
	list, ok := phasesRaw.([]map[string]any)
	if !ok {
		line, col := loc.find(-1, "", "phase")
		return nil, &PlanError{File: file, Line: line, Col: col, Key: "phase", Msg: "phases are written as [[phase]] tables"}
	}
	if len(list) == 0 {
		return nil, &PlanError{File: file, Msg: "the plan has no [[phase]] tables: nothing to run"}
	}
	if len(list) > MaxPhases {
		line, _ := loc.find(MaxPhases, "phase", "")
		return nil, &PlanError{File: file, Line: line, Phase: MaxPhases + 1, Msg: fmt.Sprintf("%d phases: a plan has at most %d (split it into several plans)", len(list), MaxPhases)}
	}
	names := map[string]int{}
	for i, m := range list {
		spec, err := decodePhase(reg, file, loc, i, m, kbBase)
		if err != nil {
			return nil, err
		}
		if prev, dup := names[spec.Name]; dup && spec.Name != "" {
			return nil, &PlanError{File: file, Line: spec.Line, Key: "name", Msg: fmt.Sprintf("phase %d has the same name %q as phase %d; names must be unique", i+1, spec.Name, prev+1)}
		}
		names[spec.Name] = i
		p.Phases = append(p.Phases, spec)
	}
	if p.Header.NodeLocalWorkdir != "" && p.Header.Workdir != "" {
		line, col := loc.find(-1, "plan", "node_local_workdir")
		return nil, &PlanError{File: file, Line: line, Col: col, Key: "plan.node_local_workdir",
			Msg: "workdir and node_local_workdir both name the workdir: give one"}
	}
	for i, s := range p.Phases {
		if len(s.Nodes) > 0 && len(s.Ranks) > 0 {
			line, col := loc.find(i, "phase", "nodes")
			return nil, &PlanError{File: file, Line: line, Col: col, Phase: i + 1, Kind: s.Kind, Key: "nodes",
				Msg: "nodes and ranks both select the phase's ranks: give one (nodes = k runs on every rank of the first k hosts)"}
		}
		if s.Group == "" {
			continue
		}
		line, col := loc.find(i, "phase", "group")
		groupErr := func(msg string) error {
			return &PlanError{File: file, Line: line, Col: col, Phase: i + 1, Kind: s.Kind, Key: "group", Msg: msg}
		}
		switch {
		case len(s.Nodes) > 0:
			return nil, groupErr("a grouped phase takes ranks = k, not nodes")
		case len(s.Ranks) != 1:
			return nil, groupErr("a grouped phase needs ranks = k (one count): it runs on the first k ranks while the next phase runs on the others")
		case i+1 >= len(p.Phases):
			return nil, groupErr("a grouped phase runs at the same time as the next phase, and this is the last one")
		case p.Phases[i+1].Group != "" || len(p.Phases[i+1].Ranks) > 1 || len(p.Phases[i+1].Nodes) > 0:
			return nil, groupErr("the phase after a grouped phase must be a plain phase (no group, no sweep)")
		}
	}
	// [plan] storage applies to every phase, so a phase that cannot run
	// over object storage would silently run on the workdir instead.
	if p.Header.IsS3() {
		for i, s := range p.Phases {
			if _, ok := allowedKeys(s.Phase.Config())["storage"]; !ok {
				line, col := loc.find(-1, "plan", "storage")
				return nil, &PlanError{File: file, Line: line, Col: col, Key: "plan.storage", Msg: fmt.Sprintf("phase %d (%s) does not run over object storage yet; set storage on the phases that do instead of in [plan]", i+1, s.Kind)}
			}
		}
	}
	// Unnamed phases are named after their kind, numbered when the kind
	// repeats, so reports never show two identical rows.
	count := map[string]int{}
	for _, s := range p.Phases {
		if s.Name == "" {
			count[s.Kind]++
		}
	}
	seq := map[string]int{}
	for _, s := range p.Phases {
		if s.Name != "" {
			continue
		}
		name := s.Kind
		for count[s.Kind] > 1 || taken(names, name) {
			seq[s.Kind]++
			name = fmt.Sprintf("%s-%d", s.Kind, seq[s.Kind])
			if !taken(names, name) {
				break
			}
		}
		s.Name = name
		names[name] = s.Index
	}
	for _, s := range p.Phases {
		s.plan = p
	}
	return p, nil
}

// maxNesting bounds how deep a plan's arrays, inline tables and dotted
// keys may nest. Real plans nest two or three levels; the TOML decoder's
// memory grows steeply with depth (a 350 KB plan of nested inline tables
// took 17 GB), so deeper input is refused before it is decoded.
const maxNesting = 16

// MaxPhases bounds a plan's phases. The TOML decoder keeps ~2.4 KB per
// table while it decodes: a 16 MiB plan of 441,000 one-line phases took
// 1.1 GB and 26 s in `prism check`, on every rank of a node at once under
// mpirun, which is an out-of-memory kill at 128 ranks. 10,000 phases is
// far above a real plan (each one runs for seconds at least).
const MaxPhases = 10000

// maxTables bounds the tables of any kind ([..] and [[..]] headers and
// inline {..}) before the decoder sees them: a phase is one table plus
// its [phase.expect] and the odd inline table, so three per phase.
const maxTables = 3 * MaxPhases

// maxValues bounds the keys and array elements (each '=' and ',' outside
// strings and comments) for the same reason: the decoder keeps ~140 bytes
// per value, and a 16 MiB plan of one-digit array elements took 755 MB,
// one of 1.6 million keys 810 MB. Twenty per phase at the phase limit.
const maxValues = 20 * MaxPhases

// checkNesting scans TOML text, outside strings and comments, for the
// deepest nesting of [ and { and the longest dotted key, and counts its
// tables and values, and refuses what goes past maxNesting, maxTables or
// maxValues with the line where it does, before the decoder spends memory
// on it.
func checkNesting(src []byte) (int, error) {
	depth, line, dots, tables, values := 0, 1, 0, 0, 0
	lineStart := true // only blanks so far on this line
	for i := 0; i < len(src); i++ {
		c := src[i]
		if (c == '[' && depth == 0 && lineStart) || c == '{' {
			if tables++; tables > maxTables {
				return line, fmt.Errorf("more than %d tables ([[phase]], [phase.expect] and inline {…} together): a plan has at most %d phases", maxTables, MaxPhases)
			}
		}
		lineStart = c == '\n' || ((c == ' ' || c == '\t' || c == '\r') && lineStart)
		switch {
		case c == '\n':
			line++
			dots = 0
		case c == '#':
			for i < len(src) && src[i] != '\n' {
				i++
			}
			i--
		case c == '"' || c == '\'':
			quote := string(src[i : i+1])
			if i+2 < len(src) && src[i+1] == c && src[i+2] == c {
				quote = string(src[i : i+3])
			}
			j := i + len(quote)
			for j < len(src) && !(string(src[j:min(j+len(quote), len(src))]) == quote) {
				if src[j] == '\\' && c == '"' {
					j++
				}
				if src[j] == '\n' {
					line++
				}
				j++
			}
			i = j + len(quote) - 1
		case c == '[' || c == '{':
			if depth++; depth > maxNesting {
				return line, fmt.Errorf("arrays and tables nest deeper than %d levels: not a plan prism decodes", maxNesting)
			}
		case c == ']' || c == '}':
			depth--
		case c == '.':
			if dots++; dots > maxNesting {
				return line, fmt.Errorf("a dotted key of more than %d parts: not a plan prism decodes", maxNesting)
			}
		case c == '=' || c == ',':
			dots = 0
			if values++; values > maxValues {
				return line, fmt.Errorf("more than %d keys and array elements: not a plan prism decodes (a plan has at most %d phases)", maxValues, MaxPhases)
			}
		}
	}
	return 0, nil
}

func taken(names map[string]int, name string) bool {
	_, ok := names[name]
	return ok
}

var safeName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// isSafeName reports whether s can name a directory under results or the
// run directory: a single path component of plain characters, and not "."
// or ".." (which would put results outside --results).
func isSafeName(s string) bool {
	return safeName.MatchString(s) && strings.Trim(s, ".") != ""
}

func decodePhase(reg *Registry, file string, loc *locator, i int, m map[string]any, kbBase int) (*Spec, error) {
	where := func(key string) (int, int) { return loc.find(i, "phase", key) }
	headerLine, _ := loc.find(i, "phase", "")
	kindName, _ := m["kind"].(string)
	fail := func(key, msg string) error {
		line, col := where(lastPart(key))
		return &PlanError{File: file, Line: line, Col: col, Phase: i + 1, Kind: kindName, Key: key, Msg: msg}
	}
	kindV, ok := m["kind"]
	if !ok {
		return nil, &PlanError{File: file, Line: headerLine, Phase: i + 1, Key: "kind", Msg: fmt.Sprintf("missing (allowed: %s)", strings.Join(reg.Names(), ", "))}
	}
	if _, ok := kindV.(string); !ok {
		return nil, fail("kind", "kind must be a string")
	}
	info, ok := reg.Lookup(kindName)
	if !ok {
		kindName = ""
		return nil, fail("kind", fmt.Sprintf("unknown kind %q (allowed: %s)", m["kind"], strings.Join(reg.Names(), ", ")))
	}
	ph := info.New()
	spec := &Spec{Index: i, Line: headerLine, Phase: ph, Info: info, Common: Common{Iterations: 1}, raw: m, kbBase: kbBase}
	// Split the table between the keys every phase has and the kind's own,
	// rejecting the rest with the full list of what would have been allowed.
	common := map[string]any{}
	own := map[string]any{}
	commonKeys := allowedKeys(&spec.Common)
	ownKeys := allowedKeys(ph.Config())
	for k, v := range m {
		_, isCommon := commonKeys[k]
		_, isOwn := ownKeys[k]
		switch {
		case isCommon:
			common[k] = v
		case isOwn:
			own[k] = v
		default:
			allowed := make([]string, 0, len(commonKeys)+len(ownKeys))
			for k := range commonKeys {
				allowed = append(allowed, k)
			}
			for k := range ownKeys {
				allowed = append(allowed, k)
			}
			sort.Strings(allowed)
			return nil, fail(k, fmt.Sprintf("unknown key (allowed: %s)", strings.Join(allowed, ", ")))
		}
	}
	// [phase.expect.<op>] sub-tables name op types, which only the kind
	// knows: they are taken out and decoded on their own, each as an
	// Expect without min_au (a phase-level figure).
	var opExpect map[string]*Expect
	if ex, ok := common["expect"].(map[string]any); ok {
		base := map[string]any{}
		for k, v := range ex {
			sub, ok := v.(map[string]any)
			if !ok {
				base[k] = v
				continue
			}
			x := &Expect{}
			if err := decodeTable(sub, x, where, file, "expect."+k+".", kbBase); err != nil {
				return nil, inPhase(err, i, kindName)
			}
			if x.MinAU != nil {
				return nil, fail("expect."+k+".min_au", "min_au is a phase figure: put it in [phase.expect]")
			}
			if opExpect == nil {
				opExpect = map[string]*Expect{}
			}
			opExpect[k] = x
		}
		common["expect"] = base
	}
	if err := decodeTable(common, &spec.Common, where, file, "", kbBase); err != nil {
		return nil, inPhase(err, i, kindName)
	}
	if opExpect != nil {
		if spec.Expect == nil {
			spec.Expect = &Expect{}
		}
		spec.Expect.Ops = opExpect
	}
	if err := decodeTable(own, ph.Config(), where, file, "", kbBase); err != nil {
		return nil, inPhase(err, i, kindName)
	}
	switch {
	case spec.Iterations < 1 || spec.Iterations > 1_000_000:
		return nil, fail("iterations", fmt.Sprintf("%d out of range (1 .. 1000000)", spec.Iterations))
	case spec.Warmup < 0 || spec.Warmup > 1_000_000:
		return nil, fail("warmup", fmt.Sprintf("%d out of range (0 .. 1000000)", spec.Warmup))
	case spec.DropCaches != "" && !slices.Contains(cachePolicies, spec.DropCaches):
		return nil, fail("drop_caches", fmt.Sprintf("unknown policy %q (allowed: %s)", spec.DropCaches, strings.Join(cachePolicies, ", ")))
	case spec.Name != "" && !isSafeName(spec.Name):
		return nil, fail("name", fmt.Sprintf("%q: use letters, digits, '.', '_' and '-' (it names a directory)", spec.Name))
	}
	if v, ok := ph.Config().(Validator); ok {
		if err := v.Validate(); err != nil {
			var ke *KeyError
			if errors.As(err, &ke) {
				return nil, fail(ke.Key, ke.Msg)
			}
			return nil, &PlanError{File: file, Line: headerLine, Phase: i + 1, Kind: kindName, Msg: err.Error()}
		}
	}
	return spec, nil
}

func inPhase(err error, i int, kind string) error {
	var pe *PlanError
	if errors.As(err, &pe) {
		pe.Phase, pe.Kind = i+1, kind
		return pe
	}
	return err
}

// decodeTable decodes m into dst (a pointer to a tagged struct) through a
// TOML round trip, rejecting keys dst does not have — also inside sub-tables
// such as [phase.expect] — and turning type and unit errors into PlanErrors
// at the offending key. Sizes are read with kbBase (see resolveSizes).
func decodeTable(m map[string]any, dst any, where func(string) (int, int), file, keyPrefix string, kbBase int) error {
	if err := checkKeys(m, reflect.TypeOf(dst).Elem(), ""); err != nil {
		var ke *KeyError
		errors.As(err, &ke)
		line, col := where(lastPart(ke.Key))
		return &PlanError{File: file, Line: line, Col: col, Key: keyPrefix + ke.Key, Msg: ke.Msg}
	}
	m, err := resolveSizes(m, reflect.TypeOf(dst), kbBase, "")
	if err != nil {
		var ke *KeyError
		errors.As(err, &ke)
		line, col := where(lastPart(ke.Key))
		return &PlanError{File: file, Line: line, Col: col, Key: keyPrefix + ke.Key, Msg: ke.Msg}
	}
	// One TOML round trip for the whole table; only when it fails, key by
	// key, so that the error names its key exactly (a plan of 10,000 phases
	// decodes in one pass per phase instead of one per key).
	var all strings.Builder
	if err := toml.NewEncoder(&all).Encode(m); err == nil {
		if _, err := toml.Decode(all.String(), dst); err == nil {
			return nil
		}
	}
	// Sub-tables (such as [phase.expect]) are first decoded on their own
	// for the same reason.
	fields := allowedKeys(dst)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if sub, ok := m[k].(map[string]any); ok {
			ft := fields[k]
			for ft.Kind() == reflect.Ptr {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && !implementsText(ft) {
				if err := decodeTable(sub, reflect.New(ft).Interface(), where, file, keyPrefix+k+".", kbBase); err != nil {
					return err
				}
			}
		}
		var buf strings.Builder
		if err := toml.NewEncoder(&buf).Encode(map[string]any{k: m[k]}); err != nil {
			line, col := where(k)
			return &PlanError{File: file, Line: line, Col: col, Key: keyPrefix + k, Msg: err.Error()}
		}
		if _, err := toml.Decode(buf.String(), dst); err != nil {
			line, col := where(k)
			return &PlanError{File: file, Line: line, Col: col, Key: keyPrefix + k, Msg: cleanTOMLError(err)}
		}
	}
	return nil
}

// cleanTOMLError rewrites the decoder's message for a single-key document
// into words about the user's value.
func cleanTOMLError(err error) string {
	var pe toml.ParseError
	msg := err.Error()
	if errors.As(err, &pe) {
		msg = pe.Message
	}
	msg = strings.TrimPrefix(msg, "toml: ")
	if j := strings.Index(msg, "): "); strings.HasPrefix(msg, "line ") && j >= 0 {
		msg = msg[j+3:]
	}
	if m := typeMismatch.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("wrong type: want %s, got %s", tomlTypeWords(m[2]), tomlTypeWords(m[1]))
	}
	return msg
}

var typeMismatch = regexp.MustCompile(`incompatible types: TOML value has type ([^;]+); destination has type (.+)$`)

func tomlTypeWords(t string) string {
	switch {
	case strings.HasPrefix(t, "float"):
		return "a number with a fraction"
	case strings.HasPrefix(t, "int"), t == "integer":
		return "an integer"
	case t == "string":
		return "a string"
	case t == "bool", t == "boolean":
		return "true or false"
	case strings.HasPrefix(t, "map"), strings.HasPrefix(t, "struct"):
		return "a table"
	case strings.HasPrefix(t, "[]"), strings.HasPrefix(t, "slice"):
		return "an array"
	}
	return t
}

// checkKeys rejects keys of m that t (a struct type) has no toml field for.
func checkKeys(m map[string]any, t reflect.Type, prefix string) error {
	allowed := allowedKeys(reflect.New(t).Interface())
	for k, v := range m {
		ft, ok := allowed[k]
		if !ok {
			names := make([]string, 0, len(allowed))
			for n := range allowed {
				names = append(names, n)
			}
			sort.Strings(names)
			return &KeyError{Key: prefix + k, Msg: fmt.Sprintf("unknown key (allowed: %s)", strings.Join(names, ", "))}
		}
		sub, isTable := v.(map[string]any)
		for ft.Kind() == reflect.Ptr {
			ft = ft.Elem()
		}
		if isTable && ft.Kind() == reflect.Struct && !implementsText(ft) {
			if err := checkKeys(sub, ft, prefix+k+"."); err != nil {
				return err
			}
		}
	}
	return nil
}

func implementsText(t reflect.Type) bool {
	return reflect.PointerTo(t).Implements(reflect.TypeOf((*interface{ UnmarshalText([]byte) error })(nil)).Elem())
}

func lastPart(key string) string {
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		return key[i+1:]
	}
	return key
}

// locator finds the line and column of a key in the plan text, because the
// TOML decoder reports positions per dotted key, and every [[phase]] shares
// the same dotted keys ("phase.count"), so only our own scan can say which
// phase's line is wrong. The text is scanned once; a lookup then reads only
// the lines of its own table, so that checking a plan of 10,000 phases
// stays linear in its length.
type locator struct {
	lines []string
	// phases[i] are the lines inside [[phase]] number i and its sub-tables
	// ([phase.expect]); tables[name] the lines of a top-level table ("" is
	// the top level before any header).
	phases  [][]int
	tables  map[string][]int
	headers map[string]int // "table" or "phase#i" -> 1-based header line
}

func newLocator(src []byte) *locator {
	l := &locator{tables: map[string][]int{}, headers: map[string]int{}}
	sc := bufio.NewScanner(strings.NewReader(string(src)))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		l.lines = append(l.lines, sc.Text())
	}
	current, phaseNo := "", -1
	for i, line := range l.lines {
		if m := headerRE.FindStringSubmatch(line); m != nil {
			current = m[1]
			if strings.HasPrefix(strings.TrimSpace(line), "[[") && current == "phase" {
				phaseNo++
				l.phases = append(l.phases, nil)
				l.headers[fmt.Sprintf("phase#%d", phaseNo)] = i + 1
			} else if current == "phase" || strings.HasPrefix(current, "phase.") {
				if _, ok := l.headers[fmt.Sprintf("%s#%d", current, phaseNo)]; !ok {
					l.headers[fmt.Sprintf("%s#%d", current, phaseNo)] = i + 1
				}
			} else if _, ok := l.headers[current]; !ok {
				l.headers[current] = i + 1
			}
			continue
		}
		if phaseNo >= 0 && (current == "phase" || strings.HasPrefix(current, "phase.")) {
			l.phases[phaseNo] = append(l.phases[phaseNo], i)
		} else {
			l.tables[current] = append(l.tables[current], i)
		}
	}
	return l
}

var headerRE = regexp.MustCompile(`^\s*\[\[?\s*([A-Za-z0-9_."-]+)\s*\]?\]`)

// find returns the 1-based line and column of key inside phase number
// phase (or, with phase < 0, inside table, "" meaning the top level).
// key "" asks for the table's header line. Unknown places give line 0.
func (l *locator) find(phase int, table, key string) (int, int) {
	var scope []int
	headerLine := 0
	if phase >= 0 {
		headerLine = l.headers[fmt.Sprintf("%s#%d", table, phase)]
		if phase < len(l.phases) {
			scope = l.phases[phase]
		}
	} else {
		headerLine = l.headers[table]
		scope = l.tables[table]
	}
	if key == "" {
		return headerLine, 0
	}
	for _, i := range scope {
		line := l.lines[i]
		t := strings.TrimLeft(line, " \t")
		for _, cand := range []string{key, `"` + key + `"`} {
			if strings.HasPrefix(t, cand) {
				rest := strings.TrimLeft(t[len(cand):], " \t")
				if strings.HasPrefix(rest, "=") || strings.HasPrefix(rest, ".") {
					return i + 1, len(line) - len(t) + 1
				}
			}
		}
	}
	return headerLine, 0
}
