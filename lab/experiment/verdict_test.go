package experiment

import (
	"math"
	"testing"
	"time"
)

// constant returns n copies of v.
func constant(n int, v float64) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = v
	}
	return xs
}

func TestVerdictOf(t *testing.T) {
	base, trig, obs := Window{2, 12}, Window{12, 22}, Window{22, 52}
	const n = 60
	tests := []struct {
		name       string
		shape      func(ok, ended []float64) // arrivals by second
		recovered  bool
		recovery   time.Duration
		afterFrac  float64
		afterRatio float64
	}{{
		name:      "healthy throughout",
		shape:     func(ok, ended []float64) {},
		recovered: true, recovery: 0, afterFrac: 1, afterRatio: 1,
	}, {
		name: "down during the trigger, back 5 s after it",
		shape: func(ok, ended []float64) {
			for i := trig.From; i < trig.To+5; i++ {
				ok[i] = 0
			}
		},
		recovered: true, recovery: 5 * time.Second, afterFrac: 1, afterRatio: 1,
	}, {
		name: "stuck at half for good",
		shape: func(ok, ended []float64) {
			for i := trig.From; i < n; i++ {
				ok[i] = 50
			}
		},
		recovered: false, afterFrac: 0.5, afterRatio: 0.5,
	}, {
		name: "94 % is not back",
		shape: func(ok, ended []float64) {
			for i := trig.From; i < n; i++ {
				ok[i] = 94
			}
		},
		recovered: false, afterFrac: 0.94, afterRatio: 0.94,
	}, {
		name: "a window needs all of its seconds: one good second among bad ones is not recovery",
		shape: func(ok, ended []float64) {
			for i := trig.From; i < n; i++ {
				ok[i] = 0
			}
			ok[30] = 100
		},
		recovered: false, afterFrac: 0, afterRatio: 0,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ok, ended := constant(n, 100), constant(n, 100)
			tc.shape(ok, ended)
			v := verdictOf(ok, ok, ended, base, trig, obs, 10)
			if v.Recovered != tc.recovered || v.Stuck == tc.recovered {
				t.Fatalf("recovered = %v, stuck = %v; want recovered %v", v.Recovered, v.Stuck, tc.recovered)
			}
			if tc.recovered && v.Recovery != tc.recovery {
				t.Errorf("recovery = %v, want %v", v.Recovery, tc.recovery)
			}
			if math.Abs(v.AfterFraction-tc.afterFrac) > 1e-9 || math.Abs(v.AfterRatio-tc.afterRatio/1) > 1e-2 {
				t.Errorf("after fraction = %v, ratio = %v; want %v, %v", v.AfterFraction, v.AfterRatio, tc.afterFrac, tc.afterRatio)
			}
			if v.Baseline != 100 || v.BaselineRatio != 1 {
				t.Errorf("baseline = %v (ratio %v), want 100 (1)", v.Baseline, v.BaselineRatio)
			}
		})
	}
}

// TestVerdictNotJudgedWithoutAWatch: healthy load alone (no trigger, no
// time after it) is neither recovered nor stuck.
func TestVerdictNotJudgedWithoutAWatch(t *testing.T) {
	base, trig, obs := Window{2, 32}, Window{32, 32}, Window{32, 32}
	ok, ended := constant(34, 100), constant(34, 100)
	v := verdictOf(ok, ok, ended, base, trig, obs, 10)
	if v.Recovered || v.Stuck || v.String() != "not judged" {
		t.Errorf("recovered %v, stuck %v (%q); want neither, \"not judged\"", v.Recovered, v.Stuck, v)
	}
	if v.BaselineRatio != 1 {
		t.Errorf("baseline ratio %v, want 1", v.BaselineRatio)
	}
}

// TestVerdictRelativeToBaseline: a fleet that refuses 20 % when healthy has
// recovered when it is back to refusing 20 %, not only at 100 %.
func TestVerdictRelativeToBaseline(t *testing.T) {
	base, trig, obs := Window{0, 10}, Window{10, 20}, Window{20, 40}
	ok, ended := constant(40, 80), constant(40, 100)
	for i := trig.From; i < trig.To; i++ {
		ok[i] = 0
	}
	v := verdictOf(ok, ok, ended, base, trig, obs, 10)
	if !v.Recovered || v.Recovery != 0 || math.Abs(v.AfterFraction-1) > 1e-9 {
		t.Errorf("got recovered %v in %v, after fraction %v; want recovered at once, fraction 1", v.Recovered, v.Recovery, v.AfterFraction)
	}
}

// A trigger whose undo was delivered late (a loaded Docker unpausing) lasts
// until then: recovery is counted from the second the undo completed in,
// not from the scheduled end; a prompt undo changes nothing.
func TestUntilLifted(t *testing.T) {
	trig, obs := Window{10, 30}, Window{30, 60}
	for _, tc := range []struct {
		lifted            time.Duration
		wantTrig, wantObs Window
	}{
		{30*time.Second + 40*time.Millisecond, trig, obs}, // SIGCONT: at once
		{32*time.Second + 700*time.Millisecond, Window{10, 32}, Window{32, 60}},
		{0, trig, obs},                // never lifted (an error ended the run)
		{75 * time.Second, trig, obs}, // past the watch: nothing to judge from
	} {
		gotTrig, gotObs := untilLifted(trig, obs, tc.lifted)
		if gotTrig != tc.wantTrig || gotObs != tc.wantObs {
			t.Errorf("lifted %v: trig %v, obs %v; want %v, %v", tc.lifted, gotTrig, gotObs, tc.wantTrig, tc.wantObs)
		}
	}
}
