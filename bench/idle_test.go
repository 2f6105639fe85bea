package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/argon2"

	"github.com/leveehq/levee/pkg/verify"
)

// idleEnv lists the idle periods of BenchmarkHashAfterIdle, comma-separated
// Go durations; default "0s,2m30s".
const idleEnv = "LEVEE_BENCH_IDLE"

// BenchmarkHashAfterIdle measures one Argon2id hash at the default policy
// (m=64 MiB, t=3, p=4) right after the process sat idle for a while, which is
// when a runtime that handed freed Argon2 arrays back to the OS makes the
// next hash fault fresh pages in. idle=2m30s outlasts one periodic forced GC
// (every 2 minutes, under GOGC only); longer periods (LEVEE_BENCH_IDLE=11m)
// let several pass. The figures that matter are faults/hash and sys-ms/hash;
// the idle time itself is not timed. Run with -benchtime=1x (each op sleeps).
func BenchmarkHashAfterIdle(b *testing.B) {
	p := verify.DefaultPolicy().Params
	salt := []byte("0123456789abcdef")
	hash := func() { argon2.IDKey(benchPassword, salt, p.Iterations, p.Memory, p.Parallelism, 32) }
	periods := os.Getenv(idleEnv)
	if periods == "" {
		periods = "0s,2m30s"
	}
	for _, field := range strings.Split(periods, ",") {
		idle, err := time.ParseDuration(strings.TrimSpace(field))
		if err != nil {
			b.Fatalf("%s: %v", idleEnv, err)
		}
		b.Run(fmt.Sprintf("idle=%v", idle), func(b *testing.B) {
			// Steady state first: under residentheap.Keep the heap grows to
			// its limit (about five arrays) before anything is reused.
			for range 8 {
				hash()
			}
			var spent usage
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				time.Sleep(idle)
				b.StartTimer()
				start := rusage()
				hash()
				u := rusage().sub(start)
				spent.user += u.user
				spent.sys += u.sys
				spent.minflt += u.minflt
			}
			n := float64(b.N)
			b.ReportMetric(spent.cpu().Seconds()*1e3/n, "cpu-ms/hash")
			b.ReportMetric(spent.sys.Seconds()*1e3/n, "sys-ms/hash")
			b.ReportMetric(float64(spent.minflt)/n, "faults/hash")
		})
	}
}
