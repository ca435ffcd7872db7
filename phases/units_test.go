package phases

import "testing"

func TestParseSize(t *testing.T) {
	good := map[string]Size{"4KiB": 4096, "1MiB": 1 << 20, "1.5GB": 3 << 29, "64k": 65536, "4096": 4096, "2 GiB": 2 << 30, "0": 0, "1b": 1,
		"4KB": 4096, "4K": 4096, "4Ki": 4096, "1MB": 1 << 20, "1TB": 1 << 40}
	for in, want := range good {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "KiB", "4XB", "1.5B", "-1KiB", "nan", "1e30PiB", "inf", "1.0001KB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
	if Size(4096).String() != "4KiB" || Size(1000).String() != "1000" {
		t.Error("Size.String")
	}
}

// With kb_base = 1000, K, KB, M, MB ... are decimal, as in fio, and the
// binary units stay binary.
func TestParseSizeBase1000(t *testing.T) {
	good := map[string]Size{"4KB": 4000, "4K": 4000, "4k": 4000, "1.5GB": 1_500_000_000, "2MB": 2_000_000, "1T": 1e12,
		"4KiB": 4096, "4Ki": 4096, "1MiB": 1 << 20, "4096": 4096, "1b": 1}
	for in, want := range good {
		if got, err := ParseSizeBase(in, 1000); err != nil || got != want {
			t.Errorf("ParseSizeBase(%q, 1000) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := ParseSizeBase("4KB", 1042); err == nil {
		t.Error("kb_base 1042 accepted")
	}
}
