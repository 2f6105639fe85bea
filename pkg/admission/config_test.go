package admission

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*Config)
		want   []string // fields named in the error; none: valid
	}{
		{"default", func(*Config) {}, nil},
		{"MinLimit 1, InitialLimit 1", func(c *Config) { c.MinLimit, c.InitialLimit = 1, 1 }, nil},
		{"InitialLimit = Ceiling", func(c *Config) { c.InitialLimit = c.Ceiling }, nil},
		{"InitialLimit 0 (the ceiling)", func(c *Config) { c.InitialLimit = 0 }, nil},
		{"InitialLimit negative", func(c *Config) { c.InitialLimit = -1 }, []string{"InitialLimit"}},
		{"no critical reserve, retries not shed before first attempts", func(c *Config) {
			c.CriticalReserve, c.RetryShare = 0, 1
		}, nil},
		{"shares at their order's bounds", func(c *Config) { c.BatchShare = 0.72 }, nil},
		{"batch share 0", func(c *Config) { c.BatchShare = 0 }, nil},

		{"InitialLimit below MinLimit", func(c *Config) { c.InitialLimit = 1 }, []string{"InitialLimit"}},
		{"InitialLimit above Ceiling", func(c *Config) { c.InitialLimit = 1001 }, []string{"InitialLimit"}},
		{"MinLimit 0", func(c *Config) { c.MinLimit = 0 }, []string{"MinLimit"}},
		{"Ceiling 0", func(c *Config) { c.Ceiling = 0 }, []string{"Ceiling", "InitialLimit"}},
		{"Ceiling huge", func(c *Config) { c.Ceiling = MaxCeiling + 1 }, []string{"Ceiling"}},
		{"Ceiling below MinLimit", func(c *Config) { c.MinLimit, c.Ceiling, c.InitialLimit = 10, 5, 5 },
			[]string{"Ceiling", "InitialLimit"}},
		{"TargetQueueWait 0", func(c *Config) { c.TargetQueueWait = 0 }, []string{"TargetQueueWait"}},
		{"TargetQueueWait negative", func(c *Config) { c.TargetQueueWait = -time.Millisecond }, []string{"TargetQueueWait"}},
		{"Backoff 0", func(c *Config) { c.Backoff = 0 }, []string{"Backoff"}},
		{"Backoff 1", func(c *Config) { c.Backoff = 1 }, []string{"Backoff"}},
		{"Window 0", func(c *Config) { c.Window = 0 }, []string{"Window"}},
		{"MinSamples 0", func(c *Config) { c.MinSamples = 0 }, []string{"MinSamples"}},
		{"CriticalReserve 1", func(c *Config) { c.CriticalReserve = 1 }, []string{"CriticalReserve"}},
		{"CriticalReserve negative", func(c *Config) { c.CriticalReserve = -0.1 }, []string{"CriticalReserve"}},
		{"BatchShare above 1", func(c *Config) { c.BatchShare = 1.5 }, []string{"BatchShare"}},
		{"RetryShare negative", func(c *Config) { c.RetryShare = -1 }, []string{"RetryShare"}},
		{"NaN share", func(c *Config) { c.BatchShare = math.NaN() }, []string{"BatchShare"}},
		{"batch outlasting interactive retries", func(c *Config) { c.BatchShare = 0.8 }, []string{"BatchShare 0.8 is above"}},
		{"critical retries shed before interactive", func(c *Config) { c.RetryShare = 0.5 }, []string{"RetryShare 0.5 is below", "BatchShare 0.5 is above"}},
		{"every field", func(c *Config) { *c = Config{} }, []string{
			"MinLimit", "Ceiling", "TargetQueueWait", "Backoff", "Window", "MinSamples", "RetryShare 0 is below",
		}}, // InitialLimit 0 is valid: the ceiling
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.modify(&cfg)
			err := cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				if _, err := New(cfg); err != nil {
					t.Fatalf("New() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want an error wrapping ErrInvalidConfig", err)
			}
			for _, field := range tc.want {
				if !strings.Contains(err.Error(), field) {
					t.Errorf("Validate() = %q, want it to name %q", err, field)
				}
			}
			if got, want := strings.Count(err.Error(), "\n")+1, len(tc.want); got != want {
				t.Errorf("Validate() reported %d problems, want %d:\n%v", got, want, err)
			}
			if l, err := New(cfg); err == nil || l != nil {
				t.Fatalf("New() = %v, %v; want nil and the error", l, err)
			}
		})
	}
}
