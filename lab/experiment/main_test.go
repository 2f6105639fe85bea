package experiment

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/leveehq/levee/internal/testlock"
)

func TestMain(m *testing.M) {
	// The capacity tests count what a server of known speed answers in a
	// measured span: they run beside no test that saturates the machine.
	testlock.Shared()
	goleak.VerifyTestMain(m)
}
