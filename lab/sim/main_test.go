package sim

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/leveehq/levee/internal/testlock"
)

func TestMain(m *testing.M) {
	// Full-scale simulations keep every core busy for seconds: they run
	// alone (see testlock).
	testlock.Exclusive()
	goleak.VerifyTestMain(m)
}
