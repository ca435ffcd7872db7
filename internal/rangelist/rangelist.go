package rangelist

import (
	"strconv"
	"strings"
)

// Format writes ns, ascending and distinct, as ranges of consecutive
// numbers joined by commas: [0 1 2 3 8 10 11] is "0-3,8,10-11", nil is "".
func Format(ns []int) string {
	var b strings.Builder
	for i := 0; i < len(ns); {
		j := i
		for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ns[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(ns[j]))
		}
		i = j + 1
	}
	return b.String()
}
