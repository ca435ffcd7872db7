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
