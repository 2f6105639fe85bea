package verifier

import (
	"context"

	"github.com/leveehq/levee/internal/serving"
)

// drain takes the node out of service: NOT_SERVING, refuse new work, let
// queued work finish or drop by deadline, then stop the gRPC server.
func (s *Server) drain() {
	s.log.Info("verifier draining")
	s.health.Shutdown() // every service NOT_SERVING, and it stays so
	s.probes.SetReady(false)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	if err := s.pool.Drain(ctx); err != nil {
		s.log.Warn("drain timed out; cancelling what is left", "timeout", s.cfg.DrainTimeout)
	}
	serving.Stop(ctx, s.grpc, s.streams)
	s.log.Info("verifier drained")
}
