package report

import (
	"strconv"
	"strings"
	"testing"
)

func TestFlagsSynthetic(t *testing.T) {
	m := synthManifest(1, 1)
	got := Flags(m)
	if len(m.Flags) != len(got) || len(got) != 2 {
		t.Fatalf("flags %+v", got)
	}
	inv, str := got[0], got[1]
	if inv.Kind != FlagScaleInversion || inv.Phase != "create_files" || inv.Ranks != 8 || inv.Rank != nil ||
		!strings.Contains(inv.Detail, "at 2 ranks") {
		t.Errorf("inversion %+v", inv)
	}
	if str.Kind != FlagStraggler || str.Ranks != 8 || str.Rank == nil || *str.Rank != 5 || !strings.Contains(str.Detail, "node002") {
		t.Errorf("straggler %+v", str)
	}
}

// work makes per-rank rows of {seconds, bytes, ops}, on host "h".
func work(rows ...[3]float64) RankRows {
	return RowsOf(workRows(rows...)...)
}

func workRows(rows ...[3]float64) []RankResult {
	var out []RankResult
	for i, r := range rows {
		out = append(out, RankResult{Rank: i, Host: "h", Seconds: r[0], Bytes: int64(r[1]), Ops: int64(r[2])})
	}
	return out
}

// The flags record rank, host, metric, value and median; with several
// hosts, a host whose ranks did less on average is flagged as a whole.
func TestImbalanceFlags(t *testing.T) {
	rows := workRows([3]float64{1, 1000, 10}, [3]float64{1, 1000, 10}, [3]float64{1, 1000, 10}, [3]float64{1, 1000, 10}, [3]float64{1.5, 500, 5}, [3]float64{1.5, 500, 5})
	for i := range rows {
		rows[i].Host = []string{"a", "a", "b", "b", "c", "c"}[i]
	}
	got := FlagsWith(&Manifest{Phases: []PhaseResult{{Name: "w", Status: StatusPassed, Ranks: 6, PerRank: RowsOf(rows...)}}}, TolerantFlagOptions(0.2))
	var seen []string
	for _, f := range got {
		who := "host:" + f.Host
		if f.Rank != nil {
			who = "rank:" + strconv.Itoa(*f.Rank)
		}
		seen = append(seen, f.Kind+"/"+f.Metric+"/"+who)
		if f.Metric == "bytes" && (f.Value != 500 || f.Median != 1000 || f.Host != "c") {
			t.Errorf("bytes flag %+v: want value 500, median 1000 on host c", f)
		}
	}
	want := "imbalance/bytes/rank:4 imbalance/bytes/rank:5 imbalance/ops/rank:4 imbalance/ops/rank:5 imbalance/bytes/host:c imbalance/ops/host:c " +
		"straggler/busy_seconds/rank:4 straggler/busy_seconds/rank:5 straggler/busy_seconds/host:c"
	if strings.Join(seen, " ") != want {
		t.Errorf("flags\n got %s\nwant %s", strings.Join(seen, " "), want)
	}
	// A looser tolerance lets the same phase through on bytes and ops.
	for _, f := range FlagsWith(&Manifest{Phases: []PhaseResult{{Name: "w", Status: StatusPassed, Ranks: 6, PerRank: RowsOf(rows...)}}}, TolerantFlagOptions(0.6)) {
		if f.Kind == FlagImbalance {
			t.Errorf("tolerance 0.6: %+v", f)
		}
	}
}

func TestFlagRules(t *testing.T) {
	rows := func(secs ...float64) RankRows {
		var out RankRows
		for i, s := range secs {
			out.Append(RankResult{Rank: i, Host: "h", Seconds: s})
		}
		return out
	}
	sweep := func(rates ...float64) []PhaseResult {
		var out []PhaseResult
		for i, r := range rates {
			out = append(out, PhaseResult{Name: "p", Status: StatusPassed, Ranks: 1 << i, OpsPerSec: r, PerRank: rows(1)})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		phases []PhaseResult
		want   []string // kind@ranks[/rank]
	}{
		{"even ranks", []PhaseResult{{Name: "p", Status: StatusPassed, Ranks: 4, PerRank: rows(1, 1.1, 0.9, 1.2)}}, nil},
		{"one straggler", []PhaseResult{{Name: "p", Status: StatusPassed, Ranks: 4, PerRank: rows(1, 1.1, 0.9, 1.6)}}, []string{"straggler@4/3"}},
		{"jitter below the floor", []PhaseResult{{Name: "p", Status: StatusPassed, Ranks: 3, PerRank: rows(0.001, 0.001, 0.005)}}, nil},
		{"failed phase not judged", []PhaseResult{{Name: "p", Status: StatusFailed, Ranks: 4, PerRank: rows(1, 1, 1, 9)}}, nil},
		{"scaling", sweep(100, 190, 350, 600), nil},
		{"flat within tolerance", sweep(100, 95, 92), nil},
		{"inversion against the best so far", sweep(100, 200, 170, 210), []string{"scale_inversion@4"}},
		{"every step down", sweep(100, 80, 60), []string{"scale_inversion@2", "scale_inversion@4"}},
		{"time-based: one rank moved a third", []PhaseResult{{Name: "p", Status: StatusPassed, Ranks: 3, PerRank: work([3]float64{1, 1510e6, 100}, [3]float64{1, 472e6, 30}, [3]float64{1, 1490e6, 99})}}, []string{"imbalance@3/1", "imbalance@3/1"}},
		{"work within tolerance", []PhaseResult{{Name: "p", Status: StatusPassed, Ranks: 3, PerRank: work([3]float64{1, 100, 100}, [3]float64{1, 81, 81}, [3]float64{1, 120, 120})}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, f := range FlagsWith(&Manifest{Phases: tc.phases}, DefaultFlagOptions) {
				s := f.Kind + "@" + strconv.Itoa(f.Ranks)
				if f.Rank != nil {
					s += "/" + strconv.Itoa(*f.Rank)
				}
				got = append(got, s)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("got %v want %v", got, tc.want)
			}
		})
	}
}
