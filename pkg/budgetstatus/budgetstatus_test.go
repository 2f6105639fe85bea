package budgetstatus_test

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/pkg/budgetstatus"
)

// TestWriteNoLeader: without a leader the output says so, and what
// clients do meanwhile.
func TestWriteNoLeader(t *testing.T) {
	var buf bytes.Buffer
	err := budgetstatus.Write(&buf, &budgetv1.StatusResponse{Replica: "10.0.0.2:7702"}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := "leader:  none (clients use their local fallback budgets)\nreplica: 10.0.0.2:7702\n\nno budgets yet\n"
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
