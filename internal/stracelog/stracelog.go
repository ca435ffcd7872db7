package stracelog

import (
	"bufio"
	"os"
	"regexp"
	"testing"
)

var (
	unfinished = regexp.MustCompile(`^(\d+)\s+(.*) <unfinished \.\.\.>$`)
	resumed    = regexp.MustCompile(`^(\d+)\s+<\.\.\. \w+ resumed>(.*)$`)
)

// Read calls fn with each line of the strace -f log at path, numbered from
// 1, a split call joined into one line at its resumption ("12 read(5</f>,
// "abcd", 4096) = 4096"); a resumption whose start is not in the log is
// dropped. A log it cannot read fails t.
func Read(t testing.TB, path string, fn func(n int, line string)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pending := map[string]string{} // by thread id: the call's start
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if m := unfinished.FindStringSubmatch(line); m != nil {
			pending[m[1]] = m[2]
			continue
		}
		if m := resumed.FindStringSubmatch(line); m != nil {
			head, ok := pending[m[1]]
			if !ok {
				continue
			}
			delete(pending, m[1])
			line = m[1] + " " + head + m[2]
		}
		fn(n, line)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
