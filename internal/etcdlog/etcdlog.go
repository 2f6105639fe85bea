// Package etcdlog hands the logs of etcd's client and embedded server,
// which speak zap, to the process's slog logger.
package etcdlog

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New returns a zap logger (what etcd's client and server take)
// that writes entries at min and above to log, so that etcd's logs go where
// the process's go, at a level that does not flood a terminal or a test.
// While quiet (if not nil) is true, every entry is logged at debug level:
// an etcd that is being stopped reports its own listeners closing as
// errors.
func New(log *slog.Logger, min slog.Level, component string, quiet *atomic.Bool) *zap.Logger {
	return zap.New(&slogCore{log: log.With("component", component), min: zapLevel(min), quiet: quiet})
}

// slogCore is a zapcore.Core over a slog.Logger.
type slogCore struct {
	log   *slog.Logger
	min   zapcore.Level
	quiet *atomic.Bool
	attrs []any
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	return l >= c.min && (c.quiet == nil || !c.quiet.Load() || c.log.Enabled(context.Background(), slog.LevelDebug))
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	cp := *c
	cp.attrs = append(slices.Clip(c.attrs), fieldArgs(fields)...)
	return &cp
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	args := append(slices.Clip(c.attrs), fieldArgs(fields)...)
	if e.LoggerName != "" {
		args = append(args, "logger", e.LoggerName)
	}
	level := slogLevel(e.Level)
	if c.quiet != nil && c.quiet.Load() {
		level = slog.LevelDebug
	}
	c.log.Log(context.Background(), level, e.Message, args...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

func fieldArgs(fields []zapcore.Field) []any {
	if len(fields) == 0 {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		args = append(args, k, enc.Fields[k])
	}
	return args
}

func zapLevel(l slog.Level) zapcore.Level {
	switch {
	case l >= slog.LevelError:
		return zapcore.ErrorLevel
	case l >= slog.LevelWarn:
		return zapcore.WarnLevel
	case l >= slog.LevelInfo:
		return zapcore.InfoLevel
	default:
		return zapcore.DebugLevel
	}
}

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l >= zapcore.WarnLevel:
		return slog.LevelWarn
	case l >= zapcore.InfoLevel:
		return slog.LevelInfo
	default:
		return slog.LevelDebug
	}
}
