package admission

import (
	"testing"
	"time"
)

// The request path, on the system clock with the default config.
//
//	go test -run '^$' -bench . -benchmem ./pkg/admission/

// BenchmarkAcquireRefused measures a refusal: the limit is full, so every
// Acquire is turned away (for the limit or for its class's share).
func BenchmarkAcquireRefused(b *testing.B) {
	for _, tc := range []struct {
		name  string
		class Class
	}{
		{"limit", critical},
		{"priority", batchRetry},
	} {
		setup := func(b *testing.B) *Limiter {
			cfg := DefaultConfig()
			cfg.InitialLimit = 100
			l := newLimiter(b, cfg)
			if tc.class == critical {
				fill(l, critical)
			} else {
				fill(l, interactive)
			}
			if l.Acquire(tc.class) == ReasonAdmitted {
				b.Fatal("admitted")
			}
			return l
		}
		b.Run(tc.name+"/serial", func(b *testing.B) {
			l := setup(b)
			b.ReportAllocs()
			for b.Loop() {
				l.Acquire(tc.class)
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			l := setup(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.Acquire(tc.class)
				}
			})
		})
	}
}

// BenchmarkAcquireRelease measures an admission and its release with a
// queue-wait sample. Windows end during the run (one per 250 ms, under the
// lock, from whichever Release finds it due), as in production.
func BenchmarkAcquireRelease(b *testing.B) {
	sample := okWait(3 * time.Millisecond)
	b.Run("serial", func(b *testing.B) {
		l := newLimiter(b, DefaultConfig())
		b.ReportAllocs()
		for b.Loop() {
			if l.Acquire(interactive) == ReasonAdmitted {
				l.Release(sample)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		cfg := DefaultConfig()
		cfg.InitialLimit = 1000
		l := newLimiter(b, cfg)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if l.Acquire(interactive) == ReasonAdmitted {
					l.Release(sample)
				}
			}
		})
	})
}
