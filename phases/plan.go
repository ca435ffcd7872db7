package phases

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

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
	Name       string `toml:"name" doc:"plan name; results go to <results>/<name>/"`
	Workdir    string `toml:"workdir" doc:"where prism creates prism-<run-id>/ (relative to the current directory)"`
	Results    string `toml:"results" doc:"where manifests go"`
	DropCaches string `toml:"drop_caches" doc:"auto | root | fadvise | none: cache policy between setup and the timed run"`
	Keep       bool   `toml:"keep" doc:"leave the run directory in place after the run"`
	Clock      string `toml:"clock" doc:"auto | tsc | os: the clock timed loops read between ops (auto: the CPU's TSC when it is invariant and in step on every CPU, as fio does; else the OS clock)"`
	Rendezvous string `toml:"rendezvous" doc:"shared directory for rank coordination without MPI (or PRISM_RENDEZVOUS)"`
	// CoordinationTimeout bounds every wait for other ranks.
	CoordinationTimeout Duration `toml:"coordination_timeout" doc:"longest wait for another rank at a barrier before failing"`
	StallAfter          Duration `toml:"stall_after" doc:"report any single op in flight longer than this, while it is stuck (0 = off)"`
	OpTimeout           Duration `toml:"op_timeout" doc:"fail the phase when a single op runs longer than this (0 = wait forever)"`
}

// DefaultHeader is the [plan] table of a plan that sets none of its keys;
// `prism list` prints these defaults.
func DefaultHeader() Header {
	return Header{Results: "results", DropCaches: "auto", Clock: "auto", CoordinationTimeout: Duration(defaultCoordinationTimeout), StallAfter: Duration(defaultStallAfter)}
}

// Common holds the keys every [[phase]] accepts besides its kind's own.
type Common struct {
	Kind       string    `toml:"kind" doc:"phase kind (see prism list)"`
	Name       string    `toml:"name" doc:"name in reports (default: kind, numbered when repeated)"`
	Iterations int       `toml:"iterations" doc:"measured repetitions"`
	Warmup     int       `toml:"warmup" doc:"repetitions run first and excluded from statistics"`
	Ranks      RankSel   `toml:"ranks" doc:"run on the first k ranks, or a sweep [1, 2, 4]; default all"`
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
	MinAU        *float64  `toml:"min_au" doc:"train: accelerator utilisation (au_percent) at least, in percent"`
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
			return errors.New("empty rank list")
		}
		out := make(RankSel, 0, len(x))
		for _, e := range x {
			n, ok := e.(int64)
			if !ok {
				return fmt.Errorf("rank list holds %T, want integers", e)
			}
			out = append(out, int(n))
		}
		*r = out
	default:
		return fmt.Errorf("ranks must be an integer or an array of integers, not %T", v)
	}
	for i, n := range *r {
		if n < 1 || n > 1<<24 {
			return fmt.Errorf("rank count %d out of range (1 .. 16777216)", n)
		}
		if i > 0 && n <= (*r)[i-1] {
			return fmt.Errorf("rank sweep must increase: %v", []int(*r))
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
	b.WriteString(e.Msg)
	return b.String()
}

// Cache policies a plan can ask for.
var cachePolicies = []string{"auto", "root", "fadvise", "none"}

// LoadPlan reads and decodes a plan file.
func LoadPlan(reg *Registry, path string) (*Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, &PlanError{File: path, Msg: err.Error()}
	}
	return DecodePlan(reg, path, b)
}

// DecodePlan decodes plan text strictly: unknown keys, wrong types, bad
// units, out-of-range values and unknown kinds are *PlanError values that
// name the file, line, column and key.
func DecodePlan(reg *Registry, file string, src []byte) (*Plan, error) {
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
		if err := decodeTable(m, &p.Header, func(key string) (int, int) { return loc.find(-1, "plan", key) }, file, "plan."); err != nil {
			return nil, err
		}
		if !contains(cachePolicies, p.Header.DropCaches) {
			line, col := loc.find(-1, "plan", "drop_caches")
			return nil, &PlanError{File: file, Line: line, Col: col, Key: "plan.drop_caches", Msg: fmt.Sprintf("unknown policy %q (allowed: %s)", p.Header.DropCaches, strings.Join(cachePolicies, ", "))}
		}
		if !contains(report.ClockModes, p.Header.Clock) {
			line, col := loc.find(-1, "plan", "clock")
			return nil, &PlanError{File: file, Line: line, Col: col, Key: "plan.clock", Msg: fmt.Sprintf("unknown clock %q (allowed: %s)", p.Header.Clock, strings.Join(report.ClockModes, ", "))}
		}
	}
	if p.Header.Name == "" {
		p.Header.Name = "plan"
	}
	if !safeName.MatchString(p.Header.Name) {
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
	names := map[string]int{}
	for i, m := range list {
		spec, err := decodePhase(reg, file, loc, i, m)
		if err != nil {
			return nil, err
		}
		if prev, dup := names[spec.Name]; dup && spec.Name != "" {
			return nil, &PlanError{File: file, Line: spec.Line, Key: "name", Msg: fmt.Sprintf("phase %d has the same name %q as phase %d; names must be unique", i+1, spec.Name, prev+1)}
		}
		names[spec.Name] = i
		p.Phases = append(p.Phases, spec)
	}
	for i, s := range p.Phases {
		if s.Group == "" {
			continue
		}
		line, col := loc.find(i, "phase", "group")
		groupErr := func(msg string) error {
			return &PlanError{File: file, Line: line, Col: col, Phase: i + 1, Kind: s.Kind, Key: "group", Msg: msg}
		}
		switch {
		case len(s.Ranks) != 1:
			return nil, groupErr("a grouped phase needs ranks = k (one count): it runs on the first k ranks while the next phase runs on the others")
		case i+1 >= len(p.Phases):
			return nil, groupErr("a grouped phase runs at the same time as the next phase, and this is the last one")
		case p.Phases[i+1].Group != "" || len(p.Phases[i+1].Ranks) > 1:
			return nil, groupErr("the phase after a grouped phase must be a plain phase (no group, no sweep)")
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
	return p, nil
}

func taken(names map[string]int, name string) bool {
	_, ok := names[name]
	return ok
}

var safeName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

func decodePhase(reg *Registry, file string, loc *locator, i int, m map[string]any) (*Spec, error) {
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
	spec := &Spec{Index: i, Line: headerLine, Phase: ph, Info: info, Common: Common{Iterations: 1}}
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
	if err := decodeTable(common, &spec.Common, where, file, ""); err != nil {
		return nil, inPhase(err, i, kindName)
	}
	if err := decodeTable(own, ph.Config(), where, file, ""); err != nil {
		return nil, inPhase(err, i, kindName)
	}
	switch {
	case spec.Iterations < 1 || spec.Iterations > 1_000_000:
		return nil, fail("iterations", fmt.Sprintf("%d out of range (1 .. 1000000)", spec.Iterations))
	case spec.Warmup < 0 || spec.Warmup > 1_000_000:
		return nil, fail("warmup", fmt.Sprintf("%d out of range (0 .. 1000000)", spec.Warmup))
	case spec.DropCaches != "" && !contains(cachePolicies, spec.DropCaches):
		return nil, fail("drop_caches", fmt.Sprintf("unknown policy %q (allowed: %s)", spec.DropCaches, strings.Join(cachePolicies, ", ")))
	case spec.Name != "" && !safeName.MatchString(spec.Name):
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
// at the offending key.
func decodeTable(m map[string]any, dst any, where func(string) (int, int), file, keyPrefix string) error {
	if err := checkKeys(m, reflect.TypeOf(dst).Elem(), ""); err != nil {
		var ke *KeyError
		errors.As(err, &ke)
		line, col := where(lastPart(ke.Key))
		return &PlanError{File: file, Line: line, Col: col, Key: keyPrefix + ke.Key, Msg: ke.Msg}
	}
	// Decode key by key so an error names its key exactly; sub-tables
	// (such as [phase.expect]) are first decoded on their own for the same
	// reason.
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
				if err := decodeTable(sub, reflect.New(ft).Interface(), where, file, keyPrefix+k+"."); err != nil {
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

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// locator finds the line and column of a key in the plan text, because the
// TOML decoder reports positions per dotted key, and every [[phase]] shares
// the same dotted keys ("phase.count"), so only our own scan can say which
// phase's line is wrong.
type locator struct {
	lines []string
}

func newLocator(src []byte) *locator {
	var l locator
	sc := bufio.NewScanner(strings.NewReader(string(src)))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		l.lines = append(l.lines, sc.Text())
	}
	return &l
}

var headerRE = regexp.MustCompile(`^\s*\[\[?\s*([A-Za-z0-9_."-]+)\s*\]?\]`)

// find returns the 1-based line and column of key inside phase number
// phase (or, with phase < 0, inside table, "" meaning the top level).
// key "" asks for the table's header line. Unknown places give line 0.
func (l *locator) find(phase int, table, key string) (int, int) {
	current, phaseNo := "", -1
	headerLine := 0
	for i, line := range l.lines {
		if m := headerRE.FindStringSubmatch(line); m != nil {
			current = m[1]
			if strings.HasPrefix(strings.TrimSpace(line), "[[") && current == "phase" {
				phaseNo++
			}
			if key == "" && current == table && (phase < 0 || phaseNo == phase) && headerLine == 0 {
				headerLine = i + 1
			}
			continue
		}
		inScope := false
		if phase >= 0 {
			inScope = phaseNo == phase && (current == "phase" || strings.HasPrefix(current, "phase."))
		} else {
			inScope = current == table
		}
		if !inScope || key == "" {
			continue
		}
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
