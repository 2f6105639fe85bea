package backoff

import (
	"context"
	"testing"
	"time"
)

func TestCeilingDoublesUpToTheCap(t *testing.T) {
	base, limit := 100*time.Millisecond, 2*time.Second
	for n, want := range map[int]time.Duration{
		-3: base, 0: base, 1: base, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond,
		5: 1600 * time.Millisecond, 6: limit, 40: limit, 63: limit, 1 << 30: limit,
	} {
		if got := Ceiling(n, base, limit); got != want {
			t.Errorf("Ceiling(%d) = %v, want %v", n, got, want)
		}
	}
	// A base so large that doubling overflows still gives the cap.
	if got := Ceiling(3, time.Duration(1<<62), time.Hour); got != time.Hour {
		t.Errorf("Ceiling with an overflowing base = %v, want the cap", got)
	}
}

// Full jitter: every wait lies in (0, ceiling], and the waits spread over
// the whole interval rather than bunching at its top (equal jitter) or at
// one value (none). Counted over 4,000 draws: each quarter of the interval
// must get between 15 % and 35 % of them.
func TestFullSpreadsOverTheWholeInterval(t *testing.T) {
	const draws = 4000
	base, limit := 10*time.Millisecond, time.Second
	ceiling := Ceiling(4, base, limit) // 80 ms
	var quarters [4]int
	for range draws {
		d := Full(4, base, limit)
		if d <= 0 || d > ceiling {
			t.Fatalf("Full = %v, want it in (0, %v]", d, ceiling)
		}
		quarters[min(int(4*d/(ceiling+1)), 3)]++
	}
	for i, n := range quarters {
		if n < draws*15/100 || n > draws*35/100 {
			t.Errorf("quarter %d of the interval got %d of %d waits: %v", i, n, draws, quarters)
		}
	}
	if d := Full(1, 0, 0); d != 1 {
		t.Errorf("Full with a zero ceiling = %v, want 1ns", d)
	}
}

// Wait grows with each failure and starts over after Reset; it returns
// false at once when its context ends.
func TestBackoffWaitAndReset(t *testing.T) {
	b := New(time.Millisecond, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		if !b.Wait(ctx) {
			t.Fatal("Wait returned false on a live context")
		}
	}
	if b.failures != 3 || Ceiling(b.failures+1, b.base, b.limit) != 8*time.Millisecond {
		t.Errorf("after 3 waits: %d failures, next ceiling %v; want 3 and 8ms", b.failures, Ceiling(b.failures+1, b.base, b.limit))
	}
	b.Reset()
	if b.failures != 0 {
		t.Errorf("Reset left %d failures", b.failures)
	}

	long := New(time.Hour, time.Hour)
	done, stop := context.WithCancel(ctx)
	stop()
	start := time.Now()
	if long.Wait(done) {
		t.Error("Wait on an ended context returned true")
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("Wait on an ended context took %v", waited)
	}
}
