package faults

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/leveehq/levee/internal/testlock"
)

func TestMain(m *testing.M) {
	// The suite drives the compose fleet at and beyond its capacity for
	// minutes: it runs alone (see testlock).
	testlock.Exclusive()
	goleak.VerifyTestMain(m)
}
