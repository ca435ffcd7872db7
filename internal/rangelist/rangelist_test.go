package rangelist

import "testing"

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		ns   []int
		want string
	}{
		{nil, ""},
		{[]int{0}, "0"},
		{[]int{7}, "7"},
		{[]int{0, 1}, "0-1"},
		{[]int{0, 1, 2, 3}, "0-3"},
		{[]int{0, 1, 2, 3, 8}, "0-3,8"},
		{[]int{0, 1, 2, 3, 8, 10, 11}, "0-3,8,10-11"},
		{[]int{1, 3, 5}, "1,3,5"},
		{[]int{12, 13, 14, 40}, "12-14,40"},
	} {
		if got := Format(tc.ns); got != tc.want {
			t.Errorf("Format(%v) = %q, want %q", tc.ns, got, tc.want)
		}
	}
}
