package spmd

import (
	"bytes"
	"strconv"
)

// Reporter is implemented by communicators on which every rank can tell
// rank 0 a few numbers outside any collective (live progress: ops and
// bytes done so far). It rides the channel of alerts (Alerter): a rank
// never waits for another to send or to read, so ranks that report at
// different times, or stop reporting, cannot hang anyone. Reports are best
// effort; a report rank 0 has not read yet is replaced by the next one.
type Reporter interface {
	// Report sends rank 0 this rank's latest numbers for tag (at most
	// ReportWords of them). It never blocks; on rank 0 it does nothing.
	Report(tag string, v []int64)
	// Collect, on rank 0, copies into latest[r] the newest numbers rank r
	// reported for tag since the last Collect, leaving the others as they
	// are (latest has Size() rows of ReportWords). Reports of other tags
	// (an earlier step's) are dropped.
	Collect(tag string, latest [][]int64)
}

// ReportWords is how many numbers one report carries (phases' progress:
// ops, bytes, elapsed, done, world rank and the rank's expected ops).
const ReportWords = 6

var _ Reporter = (*Rendezvous)(nil)

// Report writes this rank's report file in the communicator's directory,
// one per rank, overwritten (tmp + rename) by each report: its first line
// is the tag, its second the numbers.
func (c *Rendezvous) Report(tag string, v []int64) {
	if c.rank == 0 || c.Size() == 1 {
		return
	}
	b := make([]byte, 0, len(tag)+1+ReportWords*12)
	b = append(append(b, tag...), '\n')
	for i, x := range v[:min(len(v), ReportWords)] {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendInt(b, x, 10)
	}
	_ = c.publish(c.commRel(), reportName(c.rank), b)
}

// Collect reads every other rank's report file by its exact name.
func (c *Rendezvous) Collect(tag string, latest [][]int64) {
	if c.rank != 0 {
		return
	}
	rel := c.commRel()
	for r := 1; r < c.Size() && r < len(latest); r++ {
		b, err := c.job.read(rel + "/" + reportName(r))
		if err != nil {
			continue
		}
		t, nums, ok := bytes.Cut(b, []byte{'\n'})
		if !ok || string(t) != tag {
			continue
		}
		for i, f := range bytes.Fields(nums) {
			if i >= len(latest[r]) {
				break
			}
			if x, err := strconv.ParseInt(string(f), 10, 64); err == nil {
				latest[r][i] = x
			}
		}
	}
}

func reportName(rank int) string { return "report." + strconv.Itoa(rank) }
