package admission_test

import (
	"fmt"
	"time"

	"github.com/leveehq/levee/pkg/admission"
	"github.com/leveehq/levee/pkg/callmeta"
)

// A gateway asks before forwarding a request and releases the slot with what
// the verifier said about its queue.
func Example() {
	l, err := admission.New(admission.DefaultConfig())
	if err != nil {
		panic(err)
	}
	facts := callmeta.Facts{Attempt: 1, Priority: callmeta.Critical}
	class := admission.Class{Priority: facts.Priority, Retry: facts.Attempt > 1}

	if r := l.Acquire(class); r != admission.ReasonAdmitted {
		// Refuse at once: RESOURCE_EXHAUSTED, counted by r.String().
		fmt.Println("refused:", r)
		return
	}
	// ... forward to a verifier; it answered with levee-queue-wait-us: 1200.
	l.Release(admission.Sample{QueueWait: 1200 * time.Microsecond, Outcome: admission.OutcomeOK})

	fmt.Println("limit", l.Limit(), "in flight", l.InFlight())
	// Output: limit 8 in flight 0
}
