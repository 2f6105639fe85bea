package deadline

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestDefaultConfigIsValid(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v, want nil", err)
	}
	want := Config{Default: 5 * time.Second, Max: 30 * time.Second, Margin: 5 * time.Millisecond}
	if c != want {
		t.Errorf("DefaultConfig() = %+v, want %+v", c, want)
	}
}

func TestValidate(t *testing.T) {
	valid := DefaultConfig()
	tests := []struct {
		name   string
		modify func(*Config)
		want   []error // every sentinel the error must wrap; nil means valid
		wantNo []error // sentinels the error must not wrap
	}{
		{name: "default config", modify: func(*Config) {}},
		{name: "zero margin", modify: func(c *Config) { c.Margin = 0 }},
		{name: "default equals max", modify: func(c *Config) { c.Default = c.Max }},
		{name: "margin just below default", modify: func(c *Config) { c.Margin = c.Default - 1 }},
		{
			name:   "zero default",
			modify: func(c *Config) { c.Default = 0 },
			want:   []error{ErrInvalidDefault},
			wantNo: []error{ErrInvalidMax, ErrInvalidMargin},
		},
		{
			name:   "negative default",
			modify: func(c *Config) { c.Default = -time.Second },
			want:   []error{ErrInvalidDefault},
			wantNo: []error{ErrInvalidMax, ErrInvalidMargin},
		},
		{
			name:   "default above max",
			modify: func(c *Config) { c.Default = c.Max + 1 },
			want:   []error{ErrInvalidDefault},
			wantNo: []error{ErrInvalidMax, ErrInvalidMargin},
		},
		{
			name:   "zero max",
			modify: func(c *Config) { c.Max = 0 },
			want:   []error{ErrInvalidMax},
			wantNo: []error{ErrInvalidDefault, ErrInvalidMargin},
		},
		{
			name:   "negative max",
			modify: func(c *Config) { c.Max = -time.Second },
			want:   []error{ErrInvalidMax},
			wantNo: []error{ErrInvalidDefault, ErrInvalidMargin},
		},
		{
			name:   "negative margin",
			modify: func(c *Config) { c.Margin = -time.Millisecond },
			want:   []error{ErrInvalidMargin},
			wantNo: []error{ErrInvalidDefault, ErrInvalidMax},
		},
		{
			name:   "margin equals default",
			modify: func(c *Config) { c.Margin = c.Default },
			want:   []error{ErrInvalidMargin},
			wantNo: []error{ErrInvalidDefault, ErrInvalidMax},
		},
		{
			name:   "zero config reports every field",
			modify: func(c *Config) { *c = Config{} },
			want:   []error{ErrInvalidDefault, ErrInvalidMax},
			wantNo: []error{ErrInvalidMargin},
		},
		{
			name:   "all fields wrong",
			modify: func(c *Config) { *c = Config{Default: -1, Max: -1, Margin: -1} },
			want:   []error{ErrInvalidDefault, ErrInvalidMax, ErrInvalidMargin},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.modify(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate(%+v) = %v, want nil", c, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate(%+v) = nil, want errors wrapping %v", c, tt.want)
			}
			for _, want := range tt.want {
				if !errors.Is(err, want) {
					t.Errorf("Validate(%+v) = %v, want it to wrap %v", c, err, want)
				}
			}
			for _, no := range tt.wantNo {
				if errors.Is(err, no) {
					t.Errorf("Validate(%+v) = %v, want it not to wrap %v", c, err, no)
				}
			}
		})
	}
}

// fixed is the injected "now" of the clock-driven tables. Contexts built from
// it have deadlines far in the future of the real clock, so they are not done.
var fixed = time.Now().Add(24 * time.Hour)

func withDeadline(t *testing.T, d time.Time) context.Context {
	t.Helper()
	ctx, cancel := context.WithDeadline(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestRemainingAt(t *testing.T) {
	tests := []struct {
		name   string
		ctx    context.Context
		want   time.Duration
		wantOK bool
	}{
		{name: "no deadline", ctx: context.Background(), want: 0, wantOK: false},
		{name: "deadline ahead", ctx: withDeadline(t, fixed.Add(3*time.Second)), want: 3 * time.Second, wantOK: true},
		{name: "deadline now", ctx: withDeadline(t, fixed), want: 0, wantOK: true},
		{name: "deadline behind", ctx: withDeadline(t, fixed.Add(-time.Second)), want: -time.Second, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := RemainingAt(tt.ctx, fixed)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("RemainingAt() = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestCanFinishAt(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cancelledWithDeadline, cancel2 := context.WithDeadline(context.Background(), fixed.Add(time.Hour))
	cancel2()

	tests := []struct {
		name string
		ctx  context.Context
		cost time.Duration
		want bool
	}{
		{name: "no deadline", ctx: context.Background(), cost: time.Hour, want: true},
		{name: "no deadline, cancelled", ctx: cancelled, cost: 0, want: false},
		{name: "cost fits", ctx: withDeadline(t, fixed.Add(time.Second)), cost: 999 * time.Millisecond, want: true},
		{name: "cost ends exactly at deadline", ctx: withDeadline(t, fixed.Add(time.Second)), cost: time.Second, want: false},
		{name: "cost too long", ctx: withDeadline(t, fixed.Add(time.Second)), cost: 2 * time.Second, want: false},
		{name: "zero cost, time left", ctx: withDeadline(t, fixed.Add(time.Nanosecond)), cost: 0, want: true},
		{name: "zero cost at deadline", ctx: withDeadline(t, fixed), cost: 0, want: false},
		{name: "deadline passed", ctx: withDeadline(t, fixed.Add(-time.Second)), cost: 0, want: false},
		{name: "negative cost counts as zero", ctx: withDeadline(t, fixed.Add(-time.Second)), cost: -time.Hour, want: false},
		{name: "cancelled before deadline", ctx: cancelledWithDeadline, cost: 0, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CanFinishAt(tt.ctx, fixed, tt.cost); got != tt.want {
				t.Errorf("CanFinishAt(cost %v) = %v, want %v", tt.cost, got, tt.want)
			}
		})
	}
}

// TestRealClock checks the time.Now variants with deadlines an hour away from
// the real clock in either direction, so no scheduling delay can matter.
func TestRealClock(t *testing.T) {
	past := withDeadline(t, time.Now().Add(-time.Hour))
	future := withDeadline(t, time.Now().Add(time.Hour))

	tests := []struct {
		name       string
		ctx        context.Context
		cost       time.Duration
		wantPos    bool // Remaining > 0
		wantOK     bool
		wantFinish bool
	}{
		{name: "no deadline", ctx: context.Background(), cost: time.Hour, wantOK: false, wantFinish: true},
		{name: "past", ctx: past, cost: 0, wantOK: true, wantPos: false, wantFinish: false},
		{name: "future, small cost", ctx: future, cost: time.Millisecond, wantOK: true, wantPos: true, wantFinish: true},
		{name: "future, cost beyond it", ctx: future, cost: 2 * time.Hour, wantOK: true, wantPos: true, wantFinish: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			left, ok := Remaining(tt.ctx)
			if ok != tt.wantOK {
				t.Errorf("Remaining() ok = %v, want %v", ok, tt.wantOK)
			}
			if ok && (left > 0) != tt.wantPos {
				t.Errorf("Remaining() = %v, want positive: %v", left, tt.wantPos)
			}
			if ok && left > time.Hour {
				t.Errorf("Remaining() = %v, more than the hour that was set", left)
			}
			if got := CanFinish(tt.ctx, tt.cost); got != tt.wantFinish {
				t.Errorf("CanFinish(cost %v) = %v, want %v", tt.cost, got, tt.wantFinish)
			}
		})
	}
}

// between fails unless lo <= got <= hi.
func between(t *testing.T, what string, got, lo, hi time.Time) {
	t.Helper()
	if got.Before(lo) || got.After(hi) {
		t.Errorf("%s = %v, want within [%v, %v]", what, got, lo, hi)
	}
}

func TestEnsure(t *testing.T) {
	c := Config{Default: time.Minute, Max: time.Hour, Margin: time.Second}

	t.Run("no deadline gets Default", func(t *testing.T) {
		before := time.Now()
		ctx, cancel := c.Ensure(context.Background())
		defer cancel()
		after := time.Now()
		d, ok := ctx.Deadline()
		if !ok {
			t.Fatal("Ensure: context has no deadline")
		}
		between(t, "deadline", d, before.Add(c.Default), after.Add(c.Default))
	})

	t.Run("longer than Max is clamped", func(t *testing.T) {
		parent := withDeadline(t, time.Now().Add(3*time.Hour))
		before := time.Now()
		ctx, cancel := c.Ensure(parent)
		defer cancel()
		after := time.Now()
		d, _ := ctx.Deadline()
		between(t, "deadline", d, before.Add(c.Max), after.Add(c.Max))
	})

	t.Run("within Max is kept", func(t *testing.T) {
		want := time.Now().Add(2 * time.Minute)
		ctx, cancel := c.Ensure(withDeadline(t, want))
		defer cancel()
		if d, _ := ctx.Deadline(); !d.Equal(want) {
			t.Errorf("deadline = %v, want the caller's %v", d, want)
		}
	})

	t.Run("keeps values and parent cancellation", func(t *testing.T) {
		type key struct{}
		parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
		ctx, cancel := c.Ensure(parent)
		defer cancel()
		if got := ctx.Value(key{}); got != "v" {
			t.Errorf("value = %v, want v", got)
		}
		cancelParent()
		<-ctx.Done()
	})

	t.Run("cancel cancels the returned context", func(t *testing.T) {
		ctx, cancel := c.Ensure(withDeadline(t, time.Now().Add(time.Minute)))
		cancel()
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Errorf("after cancel, Err() = %v, want context.Canceled", ctx.Err())
		}
	})
}

func TestOutgoing(t *testing.T) {
	c := Config{Default: time.Minute, Max: time.Hour, Margin: time.Second}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	inAnHour := time.Now().Add(time.Hour)

	tests := []struct {
		name         string
		ctx          context.Context
		wantErr      error
		wantDeadline time.Time // zero: Default from now
	}{
		{name: "deadline minus margin", ctx: withDeadline(t, inAnHour), wantDeadline: inAnHour.Add(-c.Margin)},
		{name: "no deadline gets Default", ctx: context.Background()},
		{name: "less than margin left", ctx: withDeadline(t, time.Now().Add(c.Margin/2)), wantErr: ErrNoTimeLeft},
		{name: "deadline passed", ctx: withDeadline(t, time.Now().Add(-time.Hour)), wantErr: ErrNoTimeLeft},
		{name: "cancelled", ctx: cancelled, wantErr: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := time.Now()
			ctx, cancel, err := c.Outgoing(tt.ctx)
			defer cancel() // safe on error too
			after := time.Now()
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("Outgoing() error = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				if ctx != tt.ctx {
					t.Error("Outgoing() on error returned a context other than its argument")
				}
				return
			}
			d, ok := ctx.Deadline()
			if !ok {
				t.Fatal("Outgoing() context has no deadline")
			}
			if tt.wantDeadline.IsZero() {
				between(t, "deadline", d, before.Add(c.Default), after.Add(c.Default))
			} else if !d.Equal(tt.wantDeadline) {
				t.Errorf("deadline = %v, want %v", d, tt.wantDeadline)
			}
		})
	}

	t.Run("follows parent cancellation", func(t *testing.T) {
		parent, cancelParent := context.WithCancel(context.Background())
		ctx, cancel, err := c.Outgoing(parent)
		if err != nil {
			t.Fatal(err)
		}
		defer cancel()
		cancelParent()
		<-ctx.Done()
	})
}

func TestInterceptorConstructorsPanicOnInvalidConfig(t *testing.T) {
	constructors := map[string]func(Config){
		"UnaryServerInterceptor":  func(c Config) { c.UnaryServerInterceptor() },
		"StreamServerInterceptor": func(c Config) { c.StreamServerInterceptor() },
		"UnaryClientInterceptor":  func(c Config) { c.UnaryClientInterceptor() },
	}
	for name, build := range constructors {
		t.Run(name, func(t *testing.T) {
			defer func() {
				r := recover()
				err, _ := r.(error)
				if !errors.Is(err, ErrInvalidDefault) {
					t.Errorf("recovered %v, want a panic with an error wrapping ErrInvalidDefault", r)
				}
			}()
			build(Config{})
		})
	}
}

// Passed tells a deadline passing from a caller leaving: a cancel is the
// deadline only when it came within the margin of it.
func TestPassed(t *testing.T) {
	const margin = 50 * time.Millisecond
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want bool
	}{
		{"not done", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Hour)
		}, false},
		{"deadline exceeded", func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		}, true},
		{"cancelled long before the deadline", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			cancel()
			return ctx, cancel
		}, false},
		{"cancelled within the margin of the deadline", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithTimeout(context.Background(), margin/2)
			cancel()
			return ctx, cancel
		}, true},
		{"cancelled, no deadline", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			if got := Passed(ctx, margin); got != tt.want {
				t.Errorf("Passed = %v, want %v (ctx.Err() = %v)", got, tt.want, ctx.Err())
			}
		})
	}
}
