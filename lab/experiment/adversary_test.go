package experiment

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/grpctest"
	"github.com/leveehq/levee/pkg/verify"
)

// seenServer answers every call after answerIn and records what each call
// carried: its stored hash, its deadline, and whether its caller left.
type seenServer struct {
	verifyv1.UnimplementedVerifyServiceServer
	answerIn time.Duration

	mu        sync.Mutex
	hashes    []string
	deadlines []time.Duration // remaining at arrival; 0: none
	left      int
}

func (s *seenServer) Verify(ctx context.Context, req *verifyv1.VerifyRequest) (*verifyv1.VerifyResponse, error) {
	var d time.Duration
	if dl, ok := ctx.Deadline(); ok {
		d = time.Until(dl)
	}
	s.mu.Lock()
	s.hashes, s.deadlines = append(s.hashes, req.GetEncodedHash()), append(s.deadlines, d)
	s.mu.Unlock()
	select {
	case <-time.After(s.answerIn):
		return &verifyv1.VerifyResponse{Match: true}, nil
	case <-ctx.Done():
		s.mu.Lock()
		s.left++
		s.mu.Unlock()
		return nil, ctx.Err()
	}
}

// Each adversary sends what it says, at its share of the calls, and counts
// how they ended: cheap sends an m=8 hash, tight a deadline of its
// Deadline, cancel leaves after CancelAfter.
func TestAdversarySendsWhatItSays(t *testing.T) {
	q, err := NewRequest(verify.Params{Memory: 64, Iterations: 1, Parallelism: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range AdversaryKinds {
		t.Run(string(kind), func(t *testing.T) {
			// The server answers a cheap call at once, and the others only
			// after their callers end them: a timer late on a busy machine
			// must not let an answer beat the deadline or the cancel.
			srv := &seenServer{answerIn: time.Minute}
			if kind == Cheap {
				srv.answerIn = 50 * time.Millisecond
			}
			addr := grpctest.Serve(t, func(s *grpc.Server) { verifyv1.RegisterVerifyServiceServer(s, srv) })
			cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			cfg := DefaultAdversary()
			cfg.Kind, cfg.Share, cfg.Deadline, cfg.CancelAfter = kind, 0.5, 20*time.Millisecond, 10*time.Millisecond
			a := &adversary{cfg: cfg, q: q, rpcs: []verifyv1.VerifyServiceClient{verifyv1.NewVerifyServiceClient(cc)}}
			if kind == Cheap {
				if a.q, err = cheapRequest(); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			// Honest arrivals at 100/s and a share of one half: 100/s of
			// the adversary's, for a second.
			a.drive(ctx, rand.New(rand.NewPCG(1, 2)), time.Now(), func(time.Duration) float64 { return 100 }, time.Second)
			c := a.counts()
			if c.Sent < 75 || c.Sent > 125 {
				t.Fatalf("sent %d calls in a second at 100/s", c.Sent)
			}
			sum := int64(0)
			for _, n := range c.ByCode {
				sum += n
			}
			if sum != c.Sent {
				t.Errorf("%d calls counted by code, %d sent", sum, c.Sent)
			}
			srv.mu.Lock()
			defer srv.mu.Unlock()
			switch kind {
			case Cheap:
				if !strings.Contains(srv.hashes[0], "m=8,t=1,p=1") || c.ByCode[codes.OK] != c.Sent {
					t.Errorf("cheap: sent %q, ended %v; want m=8,t=1,p=1, all answered", srv.hashes[0], c)
				}
			case Tight:
				for _, d := range srv.deadlines {
					if d <= 0 || d > cfg.Deadline {
						t.Fatalf("tight: a call arrived with %v left, want at most %v", d, cfg.Deadline)
					}
				}
				if c.ByCode[codes.DeadlineExceeded] != c.Sent {
					t.Errorf("tight: %v, want every call past its deadline (the server does not answer)", c)
				}
			case Cancel:
				if c.ByCode[codes.Canceled] != c.Sent {
					t.Errorf("cancel: %v, want every call cancelled (the server does not answer)", c)
				}
			}
		})
	}
}
