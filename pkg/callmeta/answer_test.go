package callmeta

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
)

func TestServedRoundTrip(t *testing.T) {
	s := Served{QueueWait: 1500 * time.Microsecond, Service: 134 * time.Millisecond, Expected: 120 * time.Millisecond,
		Workers: 4, MaxQueueWait: time.Second}
	if got := ServedFrom(s.Trailer()); got != s {
		t.Errorf("ServedFrom(Trailer()) = %+v, want %+v", got, s)
	}
	// A node with no queue bound sends none, and it reads as absent.
	s.MaxQueueWait = 0
	if got := ServedFrom(s.Trailer()); got.MaxQueueWait != -1 || got.Workers != 4 {
		t.Errorf("ServedFrom(Trailer()) without a queue bound = %+v, want MaxQueueWait -1", got)
	}
	// Nor does a node that names no expected cost (an older one).
	s.Expected = 0
	if got := ServedFrom(s.Trailer()); got.Expected != -1 || got.Service != s.Service {
		t.Errorf("ServedFrom(Trailer()) without an expected cost = %+v, want Expected -1", got)
	}
	// Absent, repeated, negative, non-numeric and overflowing fields read as
	// -1, each on its own.
	for _, md := range []metadata.MD{
		{},
		{QueueWaitKey: {"1", "2"}, ServiceTimeKey: {"-5"}, WorkersKey: {"four"}, MaxQueueWaitKey: {"1s"},
			ExpectedKey: {"1.5"}},
		{QueueWaitKey: {"99999999999999999999"}, ServiceTimeKey: {"9223372036854775807"}, WorkersKey: {"4294967296"},
			MaxQueueWaitKey: {"-1000000"}, ExpectedKey: {"-3"}},
	} {
		if got := ServedFrom(md); got != (Served{-1, -1, -1, -1, -1}) {
			t.Errorf("ServedFrom(%v) = %+v, want every field -1", md, got)
		}
	}
	if got := ServedFrom(metadata.MD{WorkersKey: {"2"}}); got.Workers != 2 || got.QueueWait != -1 {
		t.Errorf("a trailer with workers only: %+v", got)
	}
}

func TestPushback(t *testing.T) {
	for _, c := range []struct {
		md             metadata.MD
		after          time.Duration
		retry, present bool
	}{
		{metadata.MD{}, 0, false, false},
		{PushbackTrailer(250 * time.Millisecond), 250 * time.Millisecond, true, true},
		{PushbackTrailer(0), 0, true, true},
		{PushbackTrailer(-time.Second), 0, false, true},
		{DoNotRetry, 0, false, true},
		{metadata.MD{PushbackKey: {"abc"}}, 0, false, true},
		{metadata.MD{PushbackKey: {"10", "20"}}, 0, false, true},
		{metadata.MD{PushbackKey: {"99999999999999"}}, time.Hour, true, true},
	} {
		after, retry, present := PushbackFrom(c.md)
		if after != c.after || retry != c.retry || present != c.present {
			t.Errorf("PushbackFrom(%v) = %v, %v, %v; want %v, %v, %v", c.md, after, retry, present, c.after, c.retry, c.present)
		}
	}
}

// FuzzAnswerTrailers: whatever a trailer holds, reading it neither panics
// nor returns a negative duration other than -1, and a pushback is never
// more than an hour.
func FuzzAnswerTrailers(f *testing.F) {
	f.Add("12", "134000", "4", "250")
	f.Add("-1", "", "x", "-1")
	f.Add(strings.Repeat("9", 40), "0", "2147483648", "1e3")
	f.Fuzz(func(t *testing.T, wait, service, workers, pushback string) {
		md := metadata.MD{QueueWaitKey: {wait}, ServiceTimeKey: {service}, WorkersKey: {workers}, PushbackKey: {pushback}}
		s := ServedFrom(md)
		if s.QueueWait < -1 || s.Service < -1 || s.Workers < -1 {
			t.Fatalf("ServedFrom = %+v", s)
		}
		if n, err := strconv.Atoi(workers); s.Workers >= 0 && (err != nil || n != s.Workers) {
			t.Fatalf("workers %q read as %d", workers, s.Workers)
		}
		after, retry, present := PushbackFrom(md)
		if !present || after < 0 || after > time.Hour || !retry && after != 0 {
			t.Fatalf("PushbackFrom(%q) = %v, %v, %v", pushback, after, retry, present)
		}
	})
}
