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

func TestFlagRules(t *testing.T) {
	rows := func(secs ...float64) []RankResult {
		var out []RankResult
		for i, s := range secs {
			out = append(out, RankResult{Rank: i, Host: "h", Seconds: s})
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
