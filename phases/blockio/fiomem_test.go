package blockio

import "testing"

// fio's buffers are numjobs x iodepth x the largest block size of each
// job, with fio's defaults (4 KiB, depth 1, one clone) and [global]'s
// options under every job; what does not size buffers is ignored.
func TestFioMemory(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []string
		job  string
		want int64
	}{
		{name: "defaults", opts: []string{"rw=read", "size=1g"}, want: 4096},
		{name: "inline", opts: []string{"bs=1m", "iodepth=32", "numjobs=4"}, want: 4 * 32 << 20},
		{name: "per direction", opts: []string{"bs=4k,1m", "iodepth=2"}, want: 2 << 20},
		{name: "range and split", opts: []string{"bsrange=4k-256k", "bssplit=4k/50:64k/50"}, want: 64 << 10},
		{name: "hostile", opts: []string{"bs=1g", "iodepth=1024", "numjobs=64"}, want: 64 << 40},
		{name: "job file", job: "[global]\nbs=128k\niodepth=8\n; comment\n[a]\nnumjobs=2\n[b]\nbs=4k\n", want: 2*8*128<<10 + 8*4<<10},
		{name: "job file, global only", job: "[global]\nbs=1m\n", want: 0},
	} {
		var job []byte
		if c.job != "" {
			job = []byte(c.job)
		}
		if got := fioMemory(c.opts, job); got != c.want {
			t.Errorf("%s: %d bytes, want %d", c.name, got, c.want)
		}
	}
	if got := fioMemory([]string{"bs=1p", "iodepth=1000000", "numjobs=4096"}, nil); got != 1<<62 {
		t.Errorf("an overflowing request: %d, want it saturated at 2^62", got)
	}
}
