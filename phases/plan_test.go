package phases

import (
	"strings"
	"testing"
)

// Deep nesting is refused before the TOML decoder sees it (its memory
// grows steeply with depth), with the line; real plans pass, and brackets
// or dots inside strings and comments do not count.
func TestCheckNesting(t *testing.T) {
	deep := "[plan]\nname = \"x\"\nv = " + strings.Repeat("{a = ", 40) + "1" + strings.Repeat("}", 40) + "\n"
	if line, err := checkNesting([]byte(deep)); err == nil || line != 3 {
		t.Errorf("40 nested inline tables: line %d, %v", line, err)
	}
	if _, err := checkNesting([]byte("x = " + strings.Repeat("[", 17) + strings.Repeat("]", 17))); err == nil {
		t.Error("17 nested arrays accepted")
	}
	if _, err := checkNesting([]byte(strings.Repeat("a.", 20) + "b = 1")); err == nil {
		t.Error("a dotted key of 21 parts accepted")
	}
	ok := `[plan]
name = "ok" # [[[[[[[[[[[[[[[[[[[[ in a comment
pattern = "{{{{{{{{{{{{{{{{{{{{{{{{ ..................... in a string"
lit = '[[[[[[[[[[[[[[[[[[[[[[[[[[['
multi = """
[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[ "still" in the string \"""
"""
[[phase]]
kind = "blockio"
options = ["rw=randread", "bs=4k", "rate=1.5"]
[phase.expect.write]
p99 = "20ms"
`
	if line, err := checkNesting([]byte(ok)); err != nil {
		t.Errorf("a plain plan refused at line %d: %v", line, err)
	}
}

// Tables are counted before the decoder sees them ([..] and [[..]]
// headers at the start of a line, and inline {..}), with the line where
// the count passes maxTables; brackets in values, strings and comments
// and the lines of a multi-line array are not tables.
func TestCheckNestingCountsTables(t *testing.T) {
	var b strings.Builder
	for range maxTables - 1 {
		b.WriteString("[[phase]]\n")
	}
	b.WriteString("x = {a = 1}\n")
	b.WriteString("v = [\n  [1, 2],\n  \"{ [\",\n]\n# [[phase]] {\ns = '''\n[[phase]]\n{'''\n")
	if line, err := checkNesting([]byte(b.String())); err != nil {
		t.Fatalf("%d tables refused at line %d: %v", maxTables, line, err)
	}
	b.WriteString("  [phase.expect]\n")
	src := b.String()
	line, err := checkNesting([]byte(src))
	if err == nil || line != strings.Count(src, "\n") || !strings.Contains(err.Error(), "at most 10000 phases") {
		t.Fatalf("%d tables: line %d, %v", maxTables+1, line, err)
	}
}

// Keys and array elements are counted too (each '=' and ',' outside
// strings and comments), with the line where the count passes maxValues.
func TestCheckNestingCountsValues(t *testing.T) {
	var b strings.Builder
	b.WriteString("v = [1")
	for range maxValues - 2 {
		b.WriteString(", 1")
	}
	b.WriteString("]\ns = \"=,=,\" # ,,==\n")
	if line, err := checkNesting([]byte(b.String())); err != nil {
		t.Fatalf("%d values refused at line %d: %v", maxValues, line, err)
	}
	b.WriteString("\nk = 1\n")
	line, err := checkNesting([]byte(b.String()))
	if err == nil || line != 4 || !strings.Contains(err.Error(), "keys and array elements") {
		t.Fatalf("%d values: line %d, %v", maxValues+1, line, err)
	}
}
