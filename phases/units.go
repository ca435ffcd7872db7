package phases

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Size is a byte count written in a plan as "4KiB", "1MiB", "1.5GB", "64k"
// or a plain integer number of bytes.
type Size int64

var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40}, {"pib", 1 << 50},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}, {"pb", 1e15},
	// Single letters are binary, as fio reads them.
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40}, {"p", 1 << 50},
	{"b", 1},
}

// ParseSize reads a size; see Size.
func ParseSize(s string) (Size, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "" {
		return 0, fmt.Errorf("empty size (write e.g. \"4KiB\", \"1MiB\", \"1.5GB\" or a byte count)")
	}
	mult := 1.0
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("bad size %q (write e.g. \"4KiB\", \"1MiB\", \"1.5GB\" or a byte count; units B, KiB MiB GiB TiB PiB, KB MB GB TB PB, k m g t p)", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("bad size %q: negative", s)
	}
	b := v * mult
	if b > math.MaxInt64/2 {
		return 0, fmt.Errorf("bad size %q: too large", s)
	}
	if b != math.Trunc(b) {
		return 0, fmt.Errorf("bad size %q: not a whole number of bytes", s)
	}
	return Size(b), nil
}

// UnmarshalText lets plans write sizes as strings or integers.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalText writes the size the way a plan would.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (s Size) String() string {
	n := int64(s)
	for _, u := range []struct {
		name string
		mult int64
	}{{"PiB", 1 << 50}, {"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult && n%u.mult == 0 {
			return fmt.Sprintf("%d%s", n/u.mult, u.name)
		}
	}
	return strconv.FormatInt(n, 10)
}

// Duration is a Go duration ("500ms", "2m30s") in a plan. A bare number is
// refused: "5" could mean seconds or milliseconds.
type Duration time.Duration

// UnmarshalText parses a Go duration.
func (d *Duration) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if _, err := strconv.ParseFloat(s, 64); err == nil && s != "0" {
		return fmt.Errorf("duration %q needs a unit, e.g. \"%ss\" or \"%sms\"", s, s, s)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("bad duration %q (Go syntax: \"300ms\", \"5s\", \"2m30s\")", s)
	}
	if v < 0 {
		return fmt.Errorf("bad duration %q: negative", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes Go syntax.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

func (d Duration) String() string { return time.Duration(d).String() }
