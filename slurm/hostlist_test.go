package slurm

import (
	"errors"
	"strings"
	"testing"
)

func TestExpandHostList(t *testing.T) {
	cases := []struct {
		in   string
		want string // space-separated
	}{
		{"node1", "node1"},
		{"gpu[001-004,010]", "gpu001 gpu002 gpu003 gpu004 gpu010"},
		{"a[1-2]-ib,b3", "a1-ib a2-ib b3"},
		{"n[01-02]x[1-2]", "n01x1 n01x2 n02x1 n02x2"},
		{"tux[8-11]", "tux8 tux9 tux10 tux11"},
		{"tux[08-11]", "tux08 tux09 tux10 tux11"},
		{"c[098-101]", "c098 c099 c100 c101"},
		{"n[5]", "n5"},
		{"[1-3]", "1 2 3"},
		{"rack[1-2]-node[3,5]", "rack1-node3 rack1-node5 rack2-node3 rack2-node5"},
		{"a,b,,c", "a b c"},
		{"a, b\tc\n", "a b c"},
		{"login-01.cluster,gpu[7-8].ib", "login-01.cluster gpu7.ib gpu8.ib"},
		{"x[0-0]", "x0"},
		{"", ""},
	}
	for _, tc := range cases {
		got, err := ExpandHostList(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("%q: got %q, want %q", tc.in, g, tc.want)
		}
	}
}

func TestExpandHostListErrors(t *testing.T) {
	cases := []struct{ in, want string }{
		{"gpu[001-004", "not closed"},
		{"gpu001-004]", "without '['"},
		{"gpu[[1]]", "nested"},
		{"gpu[]", "empty brackets"},
		{"gpu[4-1]", "backwards"},
		{"gpu[a-b]", "not a number"},
		{"gpu[1-]", "empty number"},
		{"gpu[1,,2]", "empty number"},
		{"gpu[1-2-3]", "not a number"},
		{"gpu[1234567890123456789]", "too long"},
	}
	for _, tc := range cases {
		_, err := ExpandHostList(tc.in)
		var he *HostListError
		if err == nil || !errors.As(err, &he) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want a HostListError mentioning %q", tc.in, err, tc.want)
		}
	}
}

func TestExpandHostListBounded(t *testing.T) {
	for _, in := range []string{
		"n[0-999999999]",
		"n[0-999],m[0-999],k[0-999999]",
		"n[0-999][0-999][0-9]",
		"n[1-1000000],x",
		strings.Repeat("x", 4096) + "[0-999999]",
	} {
		if _, err := ExpandHostList(in); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%.40q: %v, want ErrTooLarge", in, err)
		}
	}
	got, err := ExpandHostList("n[1-1000000]")
	if err != nil || len(got) != MaxExpand || got[MaxExpand-1] != "n1000000" {
		t.Fatalf("exactly MaxExpand hosts: %d %v", len(got), err)
	}
}

func TestExpandTasksPerNode(t *testing.T) {
	cases := []struct {
		in   string
		want []int
	}{
		{"4", []int{4}},
		{"2(x3),1", []int{2, 2, 2, 1}},
		{"1,2(x2),3", []int{1, 2, 2, 3}},
		{"8(x1)", []int{8}},
		{"0", []int{0}},
	}
	for _, tc := range cases {
		got, err := ExpandTasksPerNode(tc.in)
		if err != nil || !equal(got, tc.want) {
			t.Errorf("%q: %v %v, want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "x", "2(x)", "2(x0)", "2(3)", "2(x3", "2(x3)4", "-1", "1,,2", "2(x3),", "1234567890"} {
		if got, err := ExpandTasksPerNode(in); err == nil {
			t.Errorf("%q: %v, want an error", in, got)
		}
	}
	if _, err := ExpandTasksPerNode("1(x999999),1(x2)"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over the bound: %v", err)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzExpandHostList: never panics, respects the bound, and a list of plain
// names (no brackets) expands to itself.
func FuzzExpandHostList(f *testing.F) {
	for _, s := range []string{"gpu[001-004,010]", "a[1-2]-ib,b3", "n[01-02]x[1-2]", "a,b", "x[", "]", "n[0-999999999]", "[1-3][4-5]", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ExpandHostList(s)
		if err != nil {
			return
		}
		if len(hosts) > MaxExpand {
			t.Fatalf("%d hosts", len(hosts))
		}
		if !strings.ContainsAny(s, "[]") {
			want := strings.FieldsFunc(s, func(r rune) bool { return r < 128 && isSep(byte(r)) })
			if strings.Join(hosts, "\x00") != strings.Join(want, "\x00") {
				t.Fatalf("%q expanded to %q", s, hosts)
			}
		}
		for _, h := range hosts {
			if h == "" || strings.ContainsAny(h, "[],") {
				t.Fatalf("%q expanded to bad name %q", s, h)
			}
		}
	})
}

// FuzzExpandTasksPerNode: never panics, respects the bound, never yields a
// negative count.
func FuzzExpandTasksPerNode(f *testing.F) {
	for _, s := range []string{"2(x3),1", "4", "1(x1000000)", "(x", "2(x3", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tasks, err := ExpandTasksPerNode(s)
		if err != nil {
			return
		}
		if len(tasks) > MaxExpand || len(tasks) == 0 {
			t.Fatalf("%d entries", len(tasks))
		}
		for _, n := range tasks {
			if n < 0 {
				t.Fatalf("%q: negative count", s)
			}
		}
	})
}
