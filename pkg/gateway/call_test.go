package gateway

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/leveehq/levee/pkg/admission"
	"github.com/leveehq/levee/pkg/callmeta"
)

// newCall works out a call's class once, from its facts: every stage of the
// pipeline reads it from there.
func TestNewCall(t *testing.T) {
	g := &Gateway{}
	g.metrics = newMetrics(prometheus.NewRegistry(), g)
	tests := []struct {
		facts          callmeta.Facts
		retry          bool
		critical       bool
		slots          int64
		labelP, labelA string
	}{
		{callmeta.Facts{Attempt: 1, Priority: callmeta.Critical}, false, true, 1, "critical", "first"},
		{callmeta.Facts{Attempt: 0, Priority: callmeta.Critical}, false, true, 1, "critical", "first"},
		{callmeta.Facts{Attempt: 2, Priority: callmeta.Critical}, true, false, 0, "critical", "retry"},
		{callmeta.Facts{Attempt: 1, Priority: callmeta.Interactive}, false, false, 0, "interactive", "first"},
		{callmeta.Facts{Attempt: 3, Priority: callmeta.Batch}, true, false, 0, "batch", "retry"},
		{callmeta.Facts{Attempt: 1, Priority: callmeta.PriorityUnspecified}, false, false, 0, "unspecified", "first"},
		{callmeta.Facts{Attempt: 1, Priority: callmeta.Priority(9)}, false, false, 0, "unspecified", "first"},
	}
	for _, tt := range tests {
		c := g.newCall(callmeta.NewContext(context.Background(), tt.facts))
		if c.facts != tt.facts || c.retry != tt.retry || c.critical != tt.critical || c.slotQueue() != tt.slots {
			t.Errorf("%+v: facts %+v, retry %v, critical %v, slotQueue %d; want the facts, %v, %v, %d",
				tt.facts, c.facts, c.retry, c.critical, c.slotQueue(), tt.retry, tt.critical, tt.slots)
		}
		if want := (admission.Class{Priority: tt.facts.Priority, Retry: tt.retry}); c.class != want {
			t.Errorf("%+v: class %+v, want %+v", tt.facts, c.class, want)
		}
		// The call's counters are its class's series.
		for name, m := range map[string]prometheus.Metric{
			"admitted": c.metrics.admitted, "goodput": c.metrics.goodput, "late": c.metrics.late, "failed": c.metrics.failed,
			"refused(busy)": c.metrics.refused[reasonIndexBusy],
		} {
			if p, a := labelsOf(t, m); p != tt.labelP || a != tt.labelA {
				t.Errorf("%+v: %s counter labelled priority=%q attempt=%q, want %q %q", tt.facts, name, p, a, tt.labelP, tt.labelA)
			}
		}
	}
	if f := (call{facts: callmeta.Facts{Attempt: 1, Priority: callmeta.Batch, Tenant: "t"}}).retryFacts(); f != (callmeta.Facts{Attempt: 2, Priority: callmeta.Batch, Tenant: "t"}) {
		t.Errorf("retryFacts of a first attempt = %+v, want attempt 2, the rest kept", f)
	}
	if f := (call{facts: callmeta.Facts{}}).retryFacts(); f.Attempt != 2 {
		t.Errorf("retryFacts of an unset attempt = %+v, want attempt 2", f)
	}
}

// labelsOf returns the priority and attempt labels of one metric child.
func labelsOf(t *testing.T, m prometheus.Metric) (priority, attempt string) {
	t.Helper()
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		t.Fatal(err)
	}
	for _, l := range pb.GetLabel() {
		switch l.GetName() {
		case "priority":
			priority = l.GetValue()
		case "attempt":
			attempt = l.GetValue()
		}
	}
	return priority, attempt
}
