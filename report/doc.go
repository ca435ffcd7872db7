// Package report owns measurement and results: the per-worker Recorder that
// times each operation into an HdrHistogram, the merge of histograms across
// a rank's workers (Set.Merge), the compact binary rank record and rank
// 0's fold of every rank's (RankRecord.AppendBinary, Gathered), and the
// aggregate of a phase from those and the reduced histograms (FillGathered)
// — the cross-rank transfer itself is phases.GatherPhase, since report
// must not import spmd — the per-rank rows of a phase, packed (RankRows:
// ~30 bytes a rank where a RankResult was 96, in JSON the array of objects
// it always was), the manifest (manifest.json), the text summary,
// junit.xml, phases.csv and ops.csv (csv.go), the self-contained
// report.html (plots drawn with gonum/plot as inline SVG; the headline op
// of a phase whose ops nest, headline.go), outlier flags
// (stragglers, scale inversions, imbalance) and the comparison of runs with
// a noise-aware verdict.
//
// Histogram geometry is fixed for the whole program (LowestNs..HighestNs at
// SigFigs significant figures) so that rank 0 can sum count arrays from every
// rank element by element, which is how histograms travel: as reductions of
// []int64, never rank by rank. The range starts at 1 ns rather than 1 µs
// because an HdrHistogram resolves values near its lowest discernible value
// only to that unit: with 1 µs, a 1.5 µs page-cached stat would be recorded
// with a ~30% error, while 1 ns keeps 3 significant figures from the fastest
// cached op up to an hour-long stall.
//
// A Recorder also counts its ops and bytes per second since the phase's
// start (series.go): a fixed array of SeriesCap buckets, coarsened past
// it, summed over ranks like the histograms into the manifest's timeline.
// An op's end comes from the start its Begin marked, so the series costs
// no clock read.
//
// A Recorder buffers latencies and folds them into its histogram every
// pendCap ops (Hist folds the rest): a record is one sequential store, and
// the ~200 KiB counts array is touched in batches instead of once between
// every two syscalls, which matters where the kernel flushes the TLB on each
// syscall (page-table isolation without PCID).
//
// Timed loops read the op clock (Ticks, TickNs; see clock.go): the CPU's
// time-stamp counter where InitClock finds it invariant, calibrated and in
// step on every allowed CPU, as fio's clocksource=cpu; else the OS
// monotonic clock. The manifest's clock key says which, and why.
//
// report must not import phases or spmd: it is handed numbers and bytes, and
// writes to the io.Writer or path it is given.
package report
