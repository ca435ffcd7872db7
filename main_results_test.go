package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/report"
)

// resultsPlan is a small run whose result files the tests below read.
const resultsPlan = `
[plan]
name = "results"
drop_caches = "none"

[[phase]]
kind = "create_files"
count = 20
size = "4KiB"
ranks = [1, 2]

[[phase]]
kind = "list_files"
count = 10
`

// readCSVFile parses a result CSV file into its header and rows.
func readCSVFile(t *testing.T, path string) ([]string, [][]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil || len(recs) == 0 {
		t.Fatalf("%s: %v (%d records)", path, err, len(recs))
	}
	return recs[0], recs[1:]
}

// TestResultsCSV: a run writes phases.csv (a row per phase × rank count)
// and ops.csv (a row per phase × op × rank count) beside manifest.json,
// with the manifest's mode, holding the manifest's counts.
func TestResultsCSV(t *testing.T) {
	dir := t.TempDir()
	plan := writePlan(t, dir, resultsPlan)
	r := prism(t, dir, "run", "-n", "2", plan, "--workdir", dir, "--results", filepath.Join(dir, "res"))
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	m := loadManifest(t, r)
	mdir := filepath.Dir(manifestLine.FindStringSubmatch(r.stdout)[1])
	mi, err := os.Stat(filepath.Join(mdir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	header, rows := readCSVFile(t, filepath.Join(mdir, "phases.csv"))
	if len(header) != len(report.PhaseCSVColumns) || len(rows) != len(m.Phases) || len(rows) != 3 {
		t.Fatalf("phases.csv: %d columns, %d rows for %d phases", len(header), len(rows), len(m.Phases))
	}
	col := func(h []string, name string) int {
		for i, c := range h {
			if c == name {
				return i
			}
		}
		t.Fatalf("no column %s in %v", name, h)
		return -1
	}
	for i, row := range rows {
		p := m.Phases[i]
		if row[col(header, "phase")] != p.Name || row[col(header, "ranks")] != strconv.Itoa(p.Ranks) ||
			row[col(header, "ops")] != strconv.FormatInt(p.Ops, 10) || row[col(header, "lat_p99_ns")] != strconv.FormatInt(p.Latency.P99, 10) {
			t.Errorf("phases.csv row %d %v does not match %s [%d ranks]: ops %d p99 %d", i, row, p.Name, p.Ranks, p.Ops, p.Latency.P99)
		}
	}
	ohdr, orows := readCSVFile(t, filepath.Join(mdir, "ops.csv"))
	want := 0
	for _, p := range m.Phases {
		want += len(p.OpsByType)
	}
	if len(orows) != want || want != 4 { // create at 1 and 2 ranks, readdir and stat
		t.Fatalf("ops.csv: %d rows, want %d (the manifest's op types)", len(orows), want)
	}
	for _, row := range orows {
		var p *report.PhaseResult
		for i := range m.Phases {
			if m.Phases[i].Name == row[col(ohdr, "phase")] && strconv.Itoa(m.Phases[i].Ranks) == row[col(ohdr, "ranks")] {
				p = &m.Phases[i]
			}
		}
		if p == nil {
			t.Fatalf("ops.csv row %v names no phase", row)
		}
		st, ok := p.OpsByType[row[col(ohdr, "op")]]
		if !ok || row[col(ohdr, "ops")] != strconv.FormatInt(st.Ops, 10) || row[col(ohdr, "lat_p50_ns")] != strconv.FormatInt(st.Latency.P50, 10) {
			t.Errorf("ops.csv row %v does not match the manifest's %+v", row, st)
		}
	}
	hhdr, hrows := readCSVFile(t, filepath.Join(mdir, "hosts.csv"))
	hosts := 0
	for _, p := range m.Phases {
		hosts += len(p.PerHost)
	}
	if len(hrows) != hosts || hosts == 0 || hrows[0][col(hhdr, "host")] != m.Phases[0].PerHost[0].Host {
		t.Errorf("hosts.csv: %d rows, want %d (the manifest's per_host rows)", len(hrows), hosts)
	}
	for _, name := range []string{"phases.csv", "ops.csv", "hosts.csv"} {
		fi, err := os.Stat(filepath.Join(mdir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
		} else if fi.Mode() != mi.Mode() {
			t.Errorf("%s: mode %v, want the manifest's %v", name, fi.Mode(), mi.Mode())
		}
	}
	// Written atomically: no temporary file is left beside them.
	if left, _ := filepath.Glob(filepath.Join(mdir, ".*.tmp*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestManifestParamsTyped: the manifest records parameters with their
// TOML types (numbers, booleans, arrays; sizes and durations as a number
// plus the form the plan wrote), the command line and the plan's path.
func TestManifestParamsTyped(t *testing.T) {
	dir := t.TempDir()
	plan := writePlan(t, dir, `
[plan]
name = "params"
drop_caches = "none"

[[phase]]
kind = "create_files"
count = 20
size = "4KB"
shared_dir = true

[[phase]]
kind = "synthetic_workload"
count = 20
simulate_arrivals = false
arrivals = "deterministic"
interval = "5ms"
size_dist = "uniform"
max = "64KiB"

[[phase]]
kind = "create_dataset"
sizes = ["8KiB", "4KB", 512]
copies = 2
`)
	r := prism(t, dir, "run", "-n", "2", plan, "--workdir", dir, "--results", filepath.Join(dir, "res"))
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	b, err := os.ReadFile(manifestLine.FindStringSubmatch(r.stdout)[1])
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		CommandLine []string `json:"command_line"`
		Plan        struct {
			Path   string `json:"path"`
			Phases []struct {
				Params map[string]any `json:"params"`
			} `json:"phases"`
		} `json:"plan"`
		Phases []struct {
			Name   string         `json:"name"`
			Params map[string]any `json:"params"`
		} `json:"phases"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Phases) != 3 || len(m.Plan.Phases) != 3 {
		t.Fatalf("%d phases, %d in the plan record", len(m.Phases), len(m.Plan.Phases))
	}
	size := func(v any) (float64, string) {
		o, _ := v.(map[string]any)
		n, _ := o["bytes"].(float64)
		s, _ := o["text"].(string)
		return n, s
	}
	for _, params := range []map[string]any{m.Phases[0].Params, m.Plan.Phases[0].Params} {
		if n, ok := params["count"].(float64); !ok || n != 20 {
			t.Errorf("create_files count = %#v, want the number 20", params["count"])
		}
		if v, ok := params["shared_dir"].(bool); !ok || !v {
			t.Errorf("shared_dir = %#v, want true", params["shared_dir"])
		}
		if n, s := size(params["size"]); n != 4096 || s != "4KB" {
			t.Errorf("size = %#v, want {bytes: 4096, text: 4KB}", params["size"])
		}
		if n, ok := params["iterations"].(float64); !ok || n != 1 {
			t.Errorf("iterations = %#v", params["iterations"])
		}
	}
	syn := m.Phases[1].Params
	if v, ok := syn["simulate_arrivals"].(bool); !ok || v {
		t.Errorf("simulate_arrivals = %#v, want false", syn["simulate_arrivals"])
	}
	if d, _ := syn["interval"].(map[string]any); d["ns"] != float64(5e6) || d["text"] != "5ms" {
		t.Errorf("interval = %#v, want {ns: 5000000, text: 5ms}", syn["interval"])
	}
	if n, s := size(syn["min"]); n != 4096 || s != "4KiB" { // a default: prism's form
		t.Errorf("min = %#v, want {bytes: 4096, text: 4KiB}", syn["min"])
	}
	// Only what applied: deterministic arrivals read interval, not rate;
	// a uniform size reads min and max, not mean or mu.
	for _, k := range []string{"rate", "burst_size", "mean", "mu", "size", "pattern"} {
		if v, ok := syn[k]; ok {
			t.Errorf("synthetic_workload records %s = %v, which did not apply", k, v)
		}
	}
	sizes, ok := m.Phases[2].Params["sizes"].([]any)
	if !ok || len(sizes) != 3 {
		t.Fatalf("sizes = %#v, want an array of 3", m.Phases[2].Params["sizes"])
	}
	for i, want := range []struct {
		n float64
		s string
	}{{8192, "8KiB"}, {4096, "4KB"}, {512, "512"}} {
		if n, s := size(sizes[i]); n != want.n || s != want.s {
			t.Errorf("sizes[%d] = %#v, want {bytes: %v, text: %s}", i, sizes[i], want.n, want.s)
		}
	}
	// No value is a string holding a quoted string (the old "\"random\"").
	if strings.Contains(string(b), `"\"`) {
		t.Error("the manifest holds a string with an embedded quote")
	}
	// The user's command, not the ranks' re-run of the launcher.
	if want := []string{prismBin, "run", "-n", "2", plan, "--workdir", dir, "--results", filepath.Join(dir, "res")}; !slices.Equal(m.CommandLine, want) {
		t.Errorf("command_line = %q, want %q", m.CommandLine, want)
	}
	if m.Plan.Path != plan {
		t.Errorf("plan.path = %q, want %q", m.Plan.Path, plan)
	}
}

// TestListFiltersAndWraps: prism list KIND|FAMILY ... prints only those
// kinds (a family its kinds), an unknown name exits 2 naming it and the
// allowed ones, and lines wrap at 100 columns off a terminal, at --width,
// or at the terminal's width.
func TestListFiltersAndWraps(t *testing.T) {
	full := prism(t, ".", "list")
	if full.code != 0 {
		t.Fatalf("exit %d: %s", full.code, full.stderr)
	}
	maxLen := func(s string) (int, string) {
		n, longest := 0, ""
		for _, l := range strings.Split(strings.ReplaceAll(s, "\r", ""), "\n") {
			if len(l) > n {
				n, longest = len(l), l
			}
		}
		return n, longest
	}
	if n, l := maxLen(full.stdout); n > 100 || n < 90 {
		t.Errorf("prism list off a terminal: longest line %d columns, want 90..100: %q", n, l)
	}
	r := prism(t, ".", "list", "blockio")
	if r.code != 0 || !strings.Contains(r.stdout, "  blockio: ") || !strings.Contains(r.stdout, "  fio: ") || !strings.Contains(r.stdout, "fio options a fio phase accepts") ||
		strings.Contains(r.stdout, "create_files") || strings.Contains(r.stdout, "[plan] keys") || len(r.stdout) >= len(full.stdout)/2 {
		t.Errorf("prism list blockio (the family: blockio and fio only), exit %d:\n%.2000s", r.code, r.stdout)
	}
	r = prism(t, ".", "list", "md5_check", "create_files")
	if r.code != 0 || !strings.Contains(r.stdout, "  md5_check: ") || !strings.Contains(r.stdout, "  create_files: ") ||
		strings.Contains(r.stdout, "list_files") || strings.Contains(r.stdout, "  blockio: ") || strings.Contains(r.stdout, "fio options") ||
		strings.Index(r.stdout, "  md5_check: ") > strings.Index(r.stdout, "  create_files: ") { // the registry's order: dataload before metadata
		t.Errorf("prism list md5_check create_files, exit %d:\n%s", r.code, r.stdout)
	}
	r = prism(t, ".", "list", "create_files", "crate_files")
	if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, `"crate_files"`) || !strings.Contains(r.stderr, "create_files, ddp_load") || !strings.Contains(r.stderr, "families: blockio") {
		t.Errorf("unknown kind: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = prism(t, ".", "list", "--width", "60")
	if n, l := maxLen(r.stdout); r.code != 0 || n > 60 {
		t.Errorf("prism list --width 60: exit %d, longest line %d: %q", r.code, n, l)
	}
	// Every parameter is still listed when wrapped.
	for _, want := range []string{"kb_base", "files_per_dir", "min_bandwidth", "userspace_reap"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("prism list --width 60 lacks %s", want)
		}
	}
	// On a terminal, its width (script(1) gives prism a pseudo-terminal).
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("no script(1) for a pseudo-terminal")
	}
	cmd := exec.Command("script", "-qec", "stty cols 72 && "+prismBin+" list", "/dev/null")
	cmd.Env = cleanEnv()
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("script(1): %v", err)
	}
	if n, l := maxLen(string(out)); n > 72 || n < 60 || !strings.Contains(string(out), "kb_base") {
		t.Errorf("prism list on a 72-column terminal: longest line %d: %q", n, l)
	}
}

// TestCheckEnvironment: prism check sizes a plan for its largest sweep by
// default (fio-scaling.toml: 16 ranks, no longer exit 2), checks this
// host's workdir (exists, writable through a probe file that is removed),
// free space and inodes against the plan's peak footprint, and the cache
// policy; exit 1 when the environment cannot run the plan, 2 for a plan
// error.
func TestCheckEnvironment(t *testing.T) {
	dir := t.TempDir()
	r := prism(t, dir, "check", filepath.Join(mustAbs(t, "examples"), "fio-scaling.toml"), "--workdir", dir)
	if r.code == 2 || !strings.Contains(r.stdout, "sized for 16 ranks") || !strings.Contains(r.stdout, "peak 256GiB (seq-read-1m at 16 ranks)") {
		t.Errorf("fio-scaling.toml: exit %d, want the plan sized for its 16-rank sweep:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	free := func() fsFree {
		f, err := statfsFree(dir)
		if err != nil {
			t.Skipf("statfs: %v", err)
		}
		return f
	}()
	// Exit 0 exactly when the 256GiB peak fits here.
	if fits := free.bytes >= 256<<30 && free.files >= 8192; fits != (r.code == 0) || !fits && !strings.Contains(r.stderr, "not enough space") {
		t.Errorf("fio-scaling.toml with %d bytes free: exit %d, stderr %q", free.bytes, r.code, r.stderr)
	}
	// Its own workdir (/lustre/scratch/prism) does not exist here: exit 1,
	// not a plan error.
	if _, err := os.Stat("/lustre/scratch/prism"); os.IsNotExist(err) {
		r = prism(t, dir, "check", filepath.Join(mustAbs(t, "examples"), "fio-scaling.toml"))
		if r.code != 1 || !strings.Contains(r.stdout, "/lustre/scratch/prism: refused") || !strings.Contains(r.stderr, "does not exist") {
			t.Errorf("missing workdir: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
	}
	// A small plan fits: exit 0, and the probe file is gone.
	small := writePlan(t, dir, "[plan]\nname = \"small\"\ndrop_caches = \"none\"\n[[phase]]\nkind = \"create_files\"\ncount = 10\nranks = [1, 3]\n"+
		"[[phase]]\nkind = \"create_files\"\nname = \"w\"\nranks = 2\ngroup = \"g\"\n[[phase]]\nkind = \"list_files\"\nranks = 3\ncount = 10\n")
	r = prism(t, dir, "check", small, "--workdir", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "sized for 5 ranks") || !strings.Contains(r.stdout, "exists, writable") || !strings.Contains(r.stdout, "this host can run the plan") {
		t.Errorf("small plan (a group of 2 + 3 ranks needs 5): exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".prism-check-*")); len(left) > 0 {
		t.Errorf("probe files left: %v", left)
	}
	// A missing workdir given on the command line.
	r = prism(t, dir, "check", small, "--workdir", filepath.Join(dir, "missing"))
	if r.code != 1 || !strings.Contains(r.stderr, "does not exist") {
		t.Errorf("missing --workdir: exit %d %s", r.code, r.stderr)
	}
	// More bytes than the filesystem has free: 1GiB files, enough of them.
	// Margins of 10% and more: other tests free space and inodes on the
	// same filesystem between this test's statfs and prism's.
	if count := free.bytes/(1<<30) + free.bytes/(10<<30) + 2; count <= 100_000_000 {
		big := writePlan(t, dir, fmt.Sprintf("[[phase]]\nkind = \"create_files\"\ncount = %d\nsize = \"1GiB\"\n", count))
		r = prism(t, dir, "check", big, "--workdir", dir, "-n", "1")
		if r.code != 1 || !strings.Contains(r.stderr, "not enough space") {
			t.Errorf("a plan bigger than the free space: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
	}
	// More files than free inodes, when the filesystem counts them.
	if free.totalFiles > 0 && free.files < 3*100_000_000 {
		per := free.files/4 + free.files/40 + 1000
		many := writePlan(t, dir, fmt.Sprintf("[[phase]]\nkind = \"create_files\"\ncount = %d\nsize = 0\nranks = 4\n", per))
		r = prism(t, dir, "check", many, "--workdir", dir)
		if r.code != 1 || !strings.Contains(r.stderr, "not enough inodes") {
			t.Errorf("a plan of more files than free inodes: exit %d\n%s", r.code, r.stderr)
		}
	}
	// A plan error is still exit 2.
	if r = prism(t, dir, "check", writePlan(t, dir, "[[phase]]\nkind = \"create_files\"\ncoutn = 1\n")); r.code != 2 {
		t.Errorf("plan error: exit %d", r.code)
	}
	// drop_caches = "root" without root cannot run.
	if os.Geteuid() != 0 {
		r = prism(t, dir, "check", writePlan(t, dir, "[plan]\ndrop_caches = \"root\"\n[[phase]]\nkind = \"create_files\"\ncount = 1\n"), "--workdir", dir)
		if r.code != 1 || !strings.Contains(r.stderr, "needs root") {
			t.Errorf("drop_caches = root without root: exit %d %s", r.code, r.stderr)
		}
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestSummaryWide: prism run's summary fits 100 columns and leaves the
// byte columns of a metadata phase blank; --wide (through the local
// launcher to rank 0) adds the kind, mean, p90, p99.9 and cache columns;
// prism report --summary prints the same summary of the manifest, and
// --wide without --summary is a usage error.
func TestSummaryWide(t *testing.T) {
	dir := t.TempDir()
	plan := writePlan(t, dir, resultsPlan)
	res := filepath.Join(dir, "res")
	narrow := prism(t, dir, "run", "-n", "2", plan, "--workdir", dir, "--results", res)
	wide := prism(t, dir, "run", "-n", "2", "--wide", plan, "--workdir", dir, "--results", res)
	if narrow.code != 0 || wide.code != 0 {
		t.Fatalf("exit %d, %d\n%s\n%s", narrow.code, wide.code, narrow.stderr, wide.stderr)
	}
	header := func(out string) []string {
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "phase ") {
				return strings.Fields(l)
			}
		}
		return nil
	}
	if h := header(narrow.stdout); slices.Contains(h, "kind") || slices.Contains(h, "cache") || !slices.Contains(h, "p99") {
		t.Errorf("default header %v", h)
	}
	if h := header(wide.stdout); !slices.Contains(h, "kind") || !slices.Contains(h, "cache") || !slices.Contains(h, "p99.9") || !slices.Contains(h, "mean") {
		t.Errorf("--wide header %v", h)
	}
	for _, l := range strings.Split(narrow.stdout, "\n") {
		if len([]rune(l)) > report.SummaryWidth {
			t.Errorf("%d columns: %q", len([]rune(l)), l)
		}
		if strings.HasPrefix(l, "list_files ") && (strings.Contains(l, "0B") || strings.Contains(l, " 0.0 ")) {
			t.Errorf("list_files moves no bytes: %q", l)
		}
	}
	m := manifestLine.FindStringSubmatch(wide.stdout)[1]
	r := prism(t, dir, "report", "--summary", "--wide", m)
	if r.code != 0 || !slices.Contains(header(r.stdout), "cache") || !strings.Contains(r.stdout, "list_files") {
		t.Errorf("prism report --summary --wide: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if r := prism(t, dir, "report", "--wide", m); r.code != 2 {
		t.Errorf("report --wide without --summary: exit %d", r.code)
	}
}

// run --json prints the manifest, byte for byte as manifest.json holds it
// (both written by report.EncodeManifest, per-rank rows and all).
func TestRunJSONIsTheManifest(t *testing.T) {
	dir := t.TempDir()
	plan := writePlan(t, dir, metaPlan)
	r := prism(t, dir, "run", "-n", "2", plan, "--workdir", dir, "--results", filepath.Join(dir, "res"), "--json")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var files []string
	filepath.WalkDir(filepath.Join(dir, "res"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "manifest.json" {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != 1 {
		t.Fatalf("manifests %v", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	m, err := report.ParseManifest(files[0], b)
	if err != nil || len(m.Phases) == 0 || m.Phases[0].PerRank.Len() != 2 {
		t.Fatalf("manifest: %v, %+v", err, m)
	}
	if !strings.Contains(r.stdout, string(b)) {
		t.Errorf("stdout is not the manifest:\n%s\nmanifest.json:\n%s", r.stdout, b)
	}
}
