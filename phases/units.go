package phases

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Size is a byte count written in a plan as "4KiB", "1MiB", "1.5GB", "64k"
// or a plain integer number of bytes. Units are read as fio reads them:
// KiB, MiB, ... (and Ki, Mi, ...) are always powers of 1024; K, KB, M,
// MB, ... are powers of the plan's kb_base, 1024 unless [plan] kb_base =
// 1000 (fio's kb_base option, whose default is 1024 too), so that a bs
// copied from a fio job file means the same number of bytes in prism.
type Size int64

// KBBases are the values [plan] kb_base accepts.
var KBBases = []int{1024, 1000}

// DefaultKBBase is what K, KB, M, MB ... multiply by when a plan does not
// set kb_base: 1024, fio's default.
const DefaultKBBase = 1024

// sizeUnits are the suffixes ParseSize knows, tried in order, so that a
// suffix comes before the shorter ones it ends with ("kib" and "kb" before
// "b"); pow is the power of the base, and binary units ignore kb_base.
var sizeUnits = []struct {
	suffix string
	pow    int
	binary bool
}{
	{"kib", 1, true}, {"mib", 2, true}, {"gib", 3, true}, {"tib", 4, true}, {"pib", 5, true},
	{"ki", 1, true}, {"mi", 2, true}, {"gi", 3, true}, {"ti", 4, true}, {"pi", 5, true},
	{"kb", 1, false}, {"mb", 2, false}, {"gb", 3, false}, {"tb", 4, false}, {"pb", 5, false},
	{"k", 1, false}, {"m", 2, false}, {"g", 3, false}, {"t", 4, false}, {"p", 5, false},
	{"b", 0, true},
}

// ParseSize reads a size with the default kb_base (1024); see Size.
func ParseSize(s string) (Size, error) { return ParseSizeBase(s, DefaultKBBase) }

// ParseSizeBase reads a size whose K, KB, M, MB ... units are powers of
// kbBase (1024 or 1000); KiB, MiB ... are powers of 1024 whatever it is.
func ParseSizeBase(s string, kbBase int) (Size, error) {
	if kbBase != 1000 && kbBase != 1024 {
		return 0, fmt.Errorf("kb_base %d: want 1024 or 1000", kbBase)
	}
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "" {
		return 0, fmt.Errorf("empty size (write e.g. \"4KiB\", \"1MiB\", \"1.5GB\" or a byte count)")
	}
	mult := 1.0
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			base := float64(kbBase)
			if u.binary {
				base = 1024
			}
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), math.Pow(base, float64(u.pow))
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("bad size %q (write e.g. \"4KiB\", \"1MiB\", \"1.5GB\" or a byte count; units B, KiB MiB GiB TiB PiB (1024-based), K KB M MB G GB T TB P PB (1024-based unless [plan] kb_base = 1000))", s)
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

// CheckIOSize checks the size of one I/O transfer (a chunk, a read or
// write size): a multiple of 4KiB between 4KiB and 1GiB, so that it stays
// aligned for O_DIRECT and one buffer of it fits in memory.
func CheckIOSize(key string, s Size) error {
	if s < 4096 || s%4096 != 0 || s > 1<<30 {
		return &KeyError{Key: key, Msg: fmt.Sprintf("%s: want a multiple of 4KiB between 4KiB and 1GiB", s)}
	}
	return nil
}
