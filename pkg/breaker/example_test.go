package breaker_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/leveehq/levee/pkg/breaker"
	"github.com/leveehq/levee/pkg/breaker/breakertest"
)

// A gateway keeps one Breaker per verifier node, asks Allow before each
// request and Records every admitted request's outcome.
func Example() {
	clk := breakertest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := breaker.DefaultConfig()
	cfg.Clock = clk
	cfg.OnStateChange = func(from, to breaker.State) { fmt.Println(from, "->", to) }
	b, err := breaker.New(cfg)
	if err != nil {
		panic(err)
	}
	send := func(verify func() error) {
		if !b.Allow() {
			return // try another node
		}
		b.Record(verify() == nil)
	}

	down := func() error { return errors.New("unavailable") }
	for range 20 {
		send(down)
	}
	fmt.Println("allow while open:", b.Allow())

	clk.Advance(8 * time.Second) // past any jittered open time
	up := func() error { return nil }
	for b.State() != breaker.Closed {
		send(up)
		clk.Advance(10 * time.Millisecond)
	}
	// Output:
	// closed -> open
	// allow while open: false
	// open -> half_open
	// half_open -> closed
}
