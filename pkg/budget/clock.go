package budget

import "time"

// Clock is the time source of a Client. Durations must be measured on a
// monotonic clock (the system clock's are), so that no wall-clock step can
// stretch or cut a lease. After is how the refresher waits; AfterFunc arms
// lease expiry and must run f on its own goroutine (or, in a fake clock,
// without holding any lock Now needs).
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// After relies on Go ≥ 1.23 collecting unreferenced timers: the refresher
// drops the channel when it stops.
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func (systemClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
