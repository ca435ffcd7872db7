package report

import (
	"encoding/json"
	"io"
	"testing"
)

// FuzzManifestConsumers feeds arbitrary manifest JSON (what a user hands
// to prism compare and prism report) through the parser and everything
// that reads a parsed manifest: none of it may panic, whatever the file
// holds (missing maps, NaN-free but absurd numbers, broken histograms).
func FuzzManifestConsumers(f *testing.F) {
	good, _ := json.Marshal(synthManifest(1, 1))
	f.Add(good)
	f.Add([]byte(`{"schema_version":1,"phases":[{"name":"a","ranks":2,"histograms":{"x":"!!"},"per_rank":[{"rank":9}]}]}`))
	f.Add([]byte(`{"schema_version":1,"phases":[{"name":"a","ranks":-1,"iterations":[0,-1],"ops_by_type":{"x":{"ops":-5}}}]}`))
	f.Add([]byte(`{"schema_version":2,"phases":[{"name":"a","ranks":1,"iterations":[3],"wall_seconds":3,"timeline":{"interval_seconds":1,"ops":{"x":[1,-2,3]},"bytes":{"x":[1,2,3,4,5],"y":[9]}}}]}`))
	f.Add([]byte(`{"schema_version":2,"phases":[{"name":"a","timeline":{"interval_seconds":-1,"ops":{"x":[1,2]}}},{"name":"a","ranks":3,"timeline":{"interval_seconds":1e300,"ops":{}}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest("fuzz.json", b)
		if err != nil {
			return
		}
		base, _ := ParseManifest("base.json", good)
		Flags(m)
		_ = WriteSummary(io.Discard, m)
		_ = WriteJUnit(io.Discard, m)
		_ = WriteHTML(io.Discard, []*Manifest{m})
		_ = WriteHTML(io.Discard, []*Manifest{base, m})
		c := Compare(base, m, CompareOptions{})
		_ = c.WriteText(io.Discard)
		_ = Compare(m, base, CompareOptions{}).Regressed()
	})
}
