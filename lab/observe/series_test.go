package observe

import (
	"testing"
	"time"
)

func TestLatencyQuantile(t *testing.T) {
	s := NewSeries(time.Now(), 2)
	for range 99 {
		s.Second(0).Latency[LatBucket(10*time.Millisecond)].Add(1)
	}
	s.Second(1).Latency[LatBucket(time.Second)].Add(1)
	if got := s.LatencyQuantile(0, 2, 0.5); got < 10*time.Millisecond || got > 10900*time.Microsecond {
		t.Errorf("p50 = %v, want the bucket holding 10ms (≤ 9 %% above it)", got)
	}
	if got := s.LatencyQuantile(0, 2, 0.995); got < time.Second || got > 1090*time.Millisecond {
		t.Errorf("p99.5 = %v, want the bucket holding 1s", got)
	}
	if got := s.LatencyQuantile(0, 1, 0.99); got > 10900*time.Microsecond {
		t.Errorf("p99 of second 0 alone = %v, want ≤ 10.9ms", got)
	}
}
