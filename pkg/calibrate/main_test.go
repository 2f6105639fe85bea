package calibrate_test

import (
	"testing"

	"github.com/leveehq/levee/internal/testlock"
)

func TestMain(m *testing.M) {
	// TestRunArgon2Smoke times real hashes: not beside the lab's tests
	// (see testlock).
	testlock.Shared()
	m.Run()
}
