package fleetctl

import (
	"context"
	"fmt"
	"io"
	"math"

	"github.com/leveehq/levee/internal/promscrape"
	"github.com/leveehq/levee/pkg/wellknown"
)

// PrintMargin reads a gateway's bistability margin, and what it is computed
// from, from the gateway's /metrics page at url (the metrics named in
// wellknown) and writes it for people, with a verdict: what `levee status`
// shows beside the budget.
func PrintMargin(ctx context.Context, w io.Writer, url string) error {
	mfs, err := promscrape.Fetch(ctx, url)
	if err != nil {
		return fmt.Errorf("gateway metrics: %w", err)
	}
	margin := mfs.Sum(wellknown.MetricGatewayMargin, nil)
	offered := mfs.Sum(wellknown.MetricGatewayMarginOffered, nil)
	capacity := mfs.Sum(wellknown.MetricGatewayMarginCapacity, nil)
	load := mfs.Sum(wellknown.MetricGatewayMarginCongestedAt, nil)
	var verdict string
	switch {
	case math.IsNaN(margin):
		verdict = "unknown: no verifier has answered yet, so the capacity is not known"
	case margin > 0:
		verdict = "no congested state: after any trigger the fleet comes back by itself"
	default:
		verdict = "a congested state exists: after a trigger, the callers' retries can hold the fleet above capacity"
	}
	_, err = fmt.Fprintf(w, "\nBistability margin (gateway %s): %+.2f — %s.\n"+
		"  first attempts %.1f/s, capacity %.1f/s, load after a trigger %.1f/s\n", url, margin, verdict, offered, capacity, load)
	return err
}
