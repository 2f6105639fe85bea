package experiment

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/promscrape"
	"github.com/leveehq/levee/lab/drive"
	"github.com/leveehq/levee/pkg/wellknown"
)

// CapacityConfig says how the lab measures a fleet's capacity C, the
// goodput at saturation that loads are fractions of.
type CapacityConfig struct {
	// Fixed, when positive, is C itself: C is not measured (the unloaded
	// calls still are).
	Fixed float64
	// Callers closed-loop callers keep the fleet saturated for Measure,
	// after Warmup and then for as long as any verifier has yet to warm
	// (awaitWarm), WarmLimit at most; each sends one attempt at a time
	// with Deadline (or twice Callers unloaded p99s, if longer:
	// loadedDeadline), and waits Pause after a refusal (so that refusals
	// do not take the CPU the fleet needs), or one unloaded median when
	// Pause is zero.
	Callers         int
	Warmup, Measure time.Duration
	WarmLimit       time.Duration
	Deadline, Pause time.Duration
	// Unloaded calls are sent one at a time before the capacity is
	// measured (after a tenth as many not timed): the fleet's latency with
	// nothing else to do, which healthy-load latency is judged against.
	Unloaded int
}

// DefaultCapacity: 200 unloaded calls; 64 callers, 1 s of warm-up and up
// to a minute more until every verifier is warm, 5 s measured, 5 s
// deadlines, one unloaded median after a refusal.
//
// Warm, because a fresh verifier is slower than it will be for the rest of
// the run: it keeps Argon2's arrays resident (pkg/residentheap: GOGC off, a
// soft memory limit), so its heap grows to that limit before a freed array
// is reused, and until then every hash also faults a fresh array in. With
// the lab's 1 MiB hash that is the first ~570 hashes of each verifier (a
// 576 MiB limit): seconds of load, in which a fleet serves a third to two
// thirds of what it serves warm (220/s against 340/s on two cores).
//
// Sixty-four callers, not fewer: on two shared cores 16 left the control's
// workers short of work often enough to read C a quarter low (152/s where
// 48 callers read 214/s), which loaded the control lighter than its
// fraction said. Levee's gateway refuses what its verifiers' slots cannot
// hold, and a refused caller waits a service time, so the extra callers
// cost it little.
func DefaultCapacity() CapacityConfig {
	return CapacityConfig{Callers: 64, Warmup: time.Second, WarmLimit: time.Minute, Measure: 5 * time.Second,
		Deadline: 5 * time.Second, Unloaded: 200}
}

// Capacity is what the lab measured of a fleet before loading it.
type Capacity struct {
	// PerSecond is C: successful verifications a second at saturation
	// (CapacityConfig.Fixed when that was given).
	PerSecond float64
	// UnloadedP50 and UnloadedP99 are of the unloaded calls, each sent
	// alone: UnloadedP50 is one service time as a caller sees it (the hash
	// and one hop). Zero when none were sent.
	UnloadedP50, UnloadedP99 time.Duration
	// Warmed is how long the closed loop ran before C was measured (zero
	// when C was fixed), and Cold how many verifiers had still not warmed
	// when CapacityConfig.WarmLimit ended the wait: C then reads what a
	// colder fleet serves.
	Warmed time.Duration
	Cold   int
}

// HealthyP99Bound is the healthy-load latency the lab holds a fleet to:
// the unloaded p99 plus three service times (three unloaded medians), about
// the p99 queueing delay of a first-come-first-served M/D/2 at 0.7 of
// capacity (3.1 service times). Zero when nothing was measured unloaded.
func (c Capacity) HealthyP99Bound() time.Duration {
	if c.UnloadedP99 <= 0 {
		return 0
	}
	return c.UnloadedP99 + 3*c.UnloadedP50
}

// Validate reports every invalid field.
func (c CapacityConfig) Validate() error {
	// The unloaded calls and their deadline are used whether or not C is
	// fixed.
	if c.Deadline <= 0 || c.Unloaded < 0 || c.Unloaded > 100_000 {
		return fmt.Errorf("experiment: capacity: want deadline > 0, 0–100000 unloaded calls; got %v, %d", c.Deadline, c.Unloaded)
	}
	if c.Fixed > 0 {
		return nil
	}
	if c.Callers < 1 || c.Callers > 4096 || c.Warmup < 0 || c.WarmLimit < 0 || c.Measure < time.Second || c.Pause < 0 {
		return fmt.Errorf("experiment: capacity: want 1–4096 callers, warm-up ≥ 0, warm limit ≥ 0, measure ≥ 1s, pause ≥ 0; got %d, %v, %v, %v, %v",
			c.Callers, c.Warmup, c.WarmLimit, c.Measure, c.Pause)
	}
	return nil
}

// measureUnloaded sends n calls one at a time, after n/10 untimed ones
// (fresh processes fault their pages in on the first hashes), and returns
// the median and p99 of their latency. Every call must succeed: a fleet
// that refuses a lone caller is not ready to be measured.
func measureUnloaded(ctx context.Context, rpc verifyv1.VerifyServiceClient, q Request, n int, deadline time.Duration) (p50, p99 time.Duration, err error) {
	if n <= 0 {
		return 0, 0, nil
	}
	took := make([]time.Duration, 0, n)
	for i := range n + n/10 {
		d, err := timedVerify(ctx, rpc, q, deadline)
		if err != nil {
			return 0, 0, fmt.Errorf("experiment: unloaded call %d of %d: %w", i+1, n+n/10, err)
		}
		if i >= n/10 {
			took = append(took, d)
		}
	}
	slices.Sort(took)
	at := func(q float64) time.Duration { return took[min(len(took)-1, int(math.Ceil(q*float64(len(took))))-1)] }
	return at(0.5), at(0.99), nil
}

// timedVerify sends one call of q under deadline and returns how long its
// answer took.
func timedVerify(ctx context.Context, rpc verifyv1.VerifyServiceClient, q Request, deadline time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	began := time.Now()
	_, err := rpc.Verify(ctx, q.verify())
	return time.Since(began), err
}

// MeasureCapacity saturates fleet f (its Target, as f.Caller) with
// closed-loop callers and returns its goodput in successful verifications
// per second, once warm: C. A closed loop is right here, and only here: it
// measures what the fleet can do when it always has work, which an open
// loop at an unknown rate cannot. The verifiers among f.Members whose
// metrics page it can read are waited for until warm (awaitWarm); without
// any, the warm-up is Warmup alone.
func MeasureCapacity(parent context.Context, f *drive.Fleet, q Request, c CapacityConfig) (Capacity, error) {
	cc, err := grpc.NewClient(f.Target, f.Caller.DialOption(""), grpc.WithDisableRetry())
	if err != nil {
		return Capacity{}, fmt.Errorf("experiment: capacity: %w", err)
	}
	defer cc.Close()
	rpc := verifyv1.NewVerifyServiceClient(cc)
	var res Capacity
	// Before any hash of the lab's: a collection after this is one the
	// lab's calls brought about.
	collected := verifierCollections(parent, f)
	if res.UnloadedP50, res.UnloadedP99, err = measureUnloaded(parent, rpc, q, c.Unloaded, c.Deadline); err != nil {
		return Capacity{}, err
	}
	if c.Fixed > 0 {
		res.PerSecond = c.Fixed
		return res, nil
	}

	pause := c.Pause
	if pause == 0 {
		pause = max(res.UnloadedP50, time.Millisecond)
	}
	deadline := c.loadedDeadline(res)
	var counting atomic.Bool
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithCancel(parent)
	looping := time.Now()
	var wg sync.WaitGroup
	for range c.Callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				actx, acancel := context.WithTimeout(ctx, deadline)
				_, err := rpc.Verify(actx, q.verify())
				acancel()
				switch {
				case err == nil:
					if counting.Load() {
						ok.Add(1)
					}
				case ctx.Err() != nil:
					return
				default:
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					if status.Code(err) == codes.ResourceExhausted || status.Code(err) == codes.Unavailable {
						t := time.NewTimer(pause)
						select {
						case <-ctx.Done():
						case <-t.C:
						}
						t.Stop()
					}
				}
			}
		}()
	}
	_ = drive.Sleep(ctx, c.Warmup) // a cancelled ctx ends the measurement below
	res.Cold = awaitWarm(ctx, f, collected, c.WarmLimit)
	res.Warmed = time.Since(looping)
	counting.Store(true)
	began := time.Now()
	_ = drive.Sleep(ctx, c.Measure)
	counting.Store(false)
	took := time.Since(began)
	cancel()
	wg.Wait()
	if err := parent.Err(); err != nil {
		return Capacity{}, err
	}
	if ok.Load() == 0 {
		e, _ := firstErr.Load().(error)
		return Capacity{}, fmt.Errorf("experiment: capacity: no verification succeeded in %v (%d failed; first: %v)", took.Round(time.Millisecond), failed.Load(), e)
	}
	res.PerSecond = float64(ok.Load()) / took.Seconds()
	if err := awaitDrained(parent, rpc, q, res, c); err != nil {
		return Capacity{}, err
	}
	return res, nil
}

// loadedDeadline is the deadline of the closed loop's calls: Deadline, or
// longer when Callers calls queued on one worker would take longer than
// that. A plain server queues every call, and with a long hash (64 callers
// of 150 ms on two workers: 4.8 s) calls timing out in its queue would
// read its C low (9/s where it serves 13) and hash the abandoned calls
// anyway; Levee refuses what its queue cannot hold in time, so a longer
// deadline changes nothing there. Twice the queue's time, because exactly
// once is the last caller's whole wait with nothing to spare: scheduling
// jitter then timed calls out (a 50 ms worker read 13.5/s for 20).
func (c CapacityConfig) loadedDeadline(res Capacity) time.Duration {
	return max(c.Deadline, 2*time.Duration(c.Callers)*res.UnloadedP99)
}

// drainedStreak is how many lone calls in a row must come back as fast as
// unloaded ones for a fleet to count as drained: more than one, so that
// every verifier of a small fleet is likely to have answered one.
const drainedStreak = 3

// awaitDrained returns once the fleet has no work left from the closed
// loop. The measurement ends by cancelling up to Callers calls, and a plain
// server hashes each of them anyway: with a 150 ms hash and 64 callers that
// is seconds of backlog, and a naive client arriving into it times out,
// retries, and starts the experiment in the congested state it is meant to
// look for. A fleet is drained when drainedStreak calls, sent one at a
// time, each come back within the unloaded p99 plus one unloaded median.
// It waits at most as long as the closed loop ran, plus a deadline, plus
// one worker's time to hash twice the callers' calls (calls that timed out
// in a queue were sent again); without unloaded figures to judge by it
// does not wait.
func awaitDrained(parent context.Context, rpc verifyv1.VerifyServiceClient, q Request, res Capacity, c CapacityConfig) error {
	if res.UnloadedP99 <= 0 {
		return nil
	}
	fast := res.UnloadedP99 + res.UnloadedP50
	bound := res.Warmed + c.Measure + c.loadedDeadline(res) + 2*time.Duration(c.Callers)*res.UnloadedP99
	ctx, cancel := context.WithTimeout(parent, bound)
	defer cancel()
	streak, slowest := 0, time.Duration(0)
	for streak < drainedStreak {
		took, err := timedVerify(ctx, rpc, q, c.Deadline)
		if err == nil && took <= fast {
			streak++
			continue
		}
		streak, slowest = 0, max(slowest, took)
		if drive.Sleep(ctx, res.UnloadedP50) != nil {
			if err := parent.Err(); err != nil {
				return err
			}
			return fmt.Errorf("experiment: capacity: the fleet had not drained the measurement's calls %v after it: lone calls took up to %v, want ≤ %v",
				bound, slowest.Round(time.Millisecond), fast.Round(time.Millisecond))
		}
	}
	return nil
}

// warmPoll is how often awaitWarm reads the verifiers' metrics.
const warmPoll = 250 * time.Millisecond

// awaitWarm returns once every verifier named in before has completed a
// garbage collection since before was read (verifierCollections), or once
// limit has passed, with how many had not. A verifier keeps its heap
// resident (pkg/residentheap): with GOGC off its first collection comes when
// the heap reaches its soft memory limit, every page of which has by then
// been faulted in, and from then on hashes reuse freed arrays. Before that,
// each hash also pays to fault its array in, which is not the fleet's
// capacity but its start. A verifier whose collector runs as usual (no
// resident heap) collects early and is warm at once.
func awaitWarm(ctx context.Context, f *drive.Fleet, before map[string]uint64, limit time.Duration) int {
	end := time.Now().Add(limit)
	for {
		now := verifierCollections(ctx, f)
		cold := 0
		for name, n := range before {
			if m, ok := now[name]; !ok || m <= n {
				cold++
			}
		}
		if cold == 0 || !time.Now().Before(end) || drive.Sleep(ctx, warmPoll) != nil {
			return cold
		}
	}
}

// verifierCollections reads, from the metrics page of each of f's
// verifiers, how many garbage collections it has completed, by member name.
// A verifier whose page cannot be read, or does not count collections, is
// left out.
func verifierCollections(ctx context.Context, f *drive.Fleet) map[string]uint64 {
	out := map[string]uint64{}
	for _, m := range f.Members {
		if m.Role != drive.RoleVerifier || m.Metrics == "" {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		mfs, err := promscrape.Fetch(sctx, m.Metrics)
		cancel()
		if err != nil {
			continue
		}
		if mf, ok := mfs[wellknown.MetricGoGC]; ok && len(mf.GetMetric()) == 1 && mf.GetMetric()[0].GetSummary() != nil {
			out[m.Name] = mf.GetMetric()[0].GetSummary().GetSampleCount()
		}
	}
	return out
}
