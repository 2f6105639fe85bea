package budget_test

import (
	"context"
	"log"
	"time"

	"github.com/leveehq/levee/pkg/budget"
)

// A process makes one Client, takes a Budget per key, and on the request
// path records first attempts and asks Allow before each retry.
func Example() {
	cfg := budget.DefaultConfig()
	cfg.Target = "10.0.0.1:7801,10.0.0.2:7801" // the budgetd replicas
	cfg.Keys = []string{"verify"}
	c, err := budget.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Optional: wait for the first lease before serving.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Refresh(ctx); err != nil {
		log.Printf("budgetd not reachable, starting on the local budget: %v", err)
	}

	b, err := c.Key("verify")
	if err != nil {
		log.Fatal(err)
	}
	send := func(attempt int) error { return nil } // one RPC

	b.RecordFirstAttempt()
	err = send(1)
	if err != nil && b.Allow() { // and only if the failure is retryable
		b.RecordRetry()
		err = send(2)
	}
	_ = err
}
