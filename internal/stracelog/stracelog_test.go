package stracelog

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A call another thread interrupted is seen whole, once, at its
// resumption (with its line number there); a resumption whose start is
// not in the log is dropped; other lines pass as they are.
func TestReadJoinsSplitCalls(t *testing.T) {
	log := filepath.Join(t.TempDir(), "strace.log")
	text := "12 read(5</r/a.pt>,  <unfinished ...>\n" +
		"13 read(6</r/b.pt>, \"x\", 4) = 1\n" +
		"12 <... read resumed>\"abcd\"..., 4096) = 4096\n" +
		"14 <... lseek resumed>) = 0\n" +
		"12 mmap(NULL, 4096, PROT_READ, MAP_SHARED, 5</r/a.st>, 0 <unfinished ...>\n" +
		"12 <... mmap resumed>) = 0x7f0000000000\n"
	if err := os.WriteFile(log, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	Read(t, log, func(n int, line string) { got = append(got, fmt.Sprintf("%d %s", n, line)) })
	want := []string{
		`2 13 read(6</r/b.pt>, "x", 4) = 1`,
		`3 12 read(5</r/a.pt>, "abcd"..., 4096) = 4096`,
		`6 12 mmap(NULL, 4096, PROT_READ, MAP_SHARED, 5</r/a.st>, 0) = 0x7f0000000000`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
