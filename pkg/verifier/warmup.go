package verifier

import (
	"context"
	"crypto/rand"
	"errors"
	"runtime"
	"slices"
	"time"
)

// warm runs policy hashes: first on every worker at once, which faults in
// one Argon2 array per worker before any caller pays for it (the heap then
// grows to its resident soft limit, pkg/residentheap, under the first
// callers' hashes, each of which faults its own array in: about limit ÷
// array hashes, 9 at the default policy), then
// calibrationHashes of them one at a time, with the machine otherwise idle:
// their median calibrates the cost model (verify.CostModel.Calibrate). One
// at a time, because hashes run at once share the cores and the memory
// bandwidth, and the model's base is the time of a hash with its cores to
// itself; the stretch learns the rest under load.
func (s *Server) warm(ctx context.Context) error {
	pw := []byte("levee warm-up")
	errs := make(chan error, s.cfg.Workers)
	for range s.cfg.Workers {
		go func() {
			_, err := s.pool.Submit(ctx, 0, s.policy.MemoryBytes(), func() {
				_, _ = s.v.HashPassword(pw, rand.Reader)
			})
			errs <- err
		}()
	}
	var err error
	for range s.cfg.Workers {
		err = errors.Join(err, <-errs)
	}
	if err != nil {
		return err
	}
	// Free the first round's arrays so that the next reuses them.
	runtime.GC()
	took := make([]time.Duration, 0, calibrationHashes)
	for range calibrationHashes {
		var d time.Duration
		var herr error
		if _, err := s.pool.Submit(ctx, 0, s.policy.MemoryBytes(), func() {
			start := time.Now()
			_, herr = s.v.HashPassword(pw, rand.Reader)
			d = time.Since(start)
		}); err != nil {
			return err
		}
		if herr != nil {
			return herr
		}
		if !s.stall.spanned(time.Now().Add(-d), time.Now()) {
			took = append(took, d)
		}
	}
	if len(took) == 0 {
		return errors.New("every calibration hash spanned a stall")
	}
	slices.Sort(took)
	s.model.Calibrate(s.policy, took[len(took)/2], runtime.GOMAXPROCS(0))
	return nil
}

// calibrationHashes is how many warm-up hashes, run one at a time, calibrate
// the cost model: the median of five ignores two outliers.
const calibrationHashes = 5
