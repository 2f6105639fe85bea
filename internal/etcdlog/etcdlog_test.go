package etcdlog

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
)

// Entries below the minimum are dropped; the rest reach slog at the same
// level with their fields and the component; while quiet, errors are
// logged at debug (an etcd being stopped reports its own shutdown as
// errors).
func TestLevelsFieldsAndQuiet(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	quiet := new(atomic.Bool)
	z := New(log, slog.LevelWarn, "etcd-server", quiet).With(zap.String("member", "m1"))

	z.Info("dropped: below the minimum")
	z.Warn("slow apply", zap.Int("took-ms", 120))
	quiet.Store(true)
	z.Error("listener closed")
	out := buf.String()

	if strings.Contains(out, "dropped") {
		t.Errorf("an info entry passed a warn minimum:\n%s", out)
	}
	if !strings.Contains(out, `level=WARN msg="slow apply" component=etcd-server member=m1 took-ms=120`) {
		t.Errorf("the warning is missing or lost its fields:\n%s", out)
	}
	if strings.Contains(out, "listener closed") {
		t.Errorf("an error while quiet was logged above debug:\n%s", out)
	}
}
