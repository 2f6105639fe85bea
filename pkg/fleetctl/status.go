package fleetctl

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/pkg/budgetstatus"
	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/wellknown"
)

// QueryStatus asks the budgetd replica at addr for the status of key (all
// keys if empty), presenting id (nil: plaintext). A follower forwards the
// question to the leader.
func QueryStatus(ctx context.Context, addr, key string, id *mtls.Source) (*budgetv1.StatusResponse, error) {
	cc, err := grpc.NewClient(addr, id.DialOption(""))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	defer cc.Close()
	resp, err := budgetv1.NewBudgetServiceClient(cc).Status(ctx, &budgetv1.StatusRequest{Key: key})
	if err != nil {
		return nil, fmt.Errorf("status from %s: %w", addr, err)
	}
	return resp, nil
}

// StatusCommand is the command line's budget status, the one behind both
// `budgetd status` and `levee status`: its flags, and the query it makes
// with the operator's identity.
type StatusCommand struct {
	Addr    string
	Key     string
	JSON    bool
	Timeout time.Duration
	TLS     mtls.Settings
}

// AddFlags registers -addr (default: budgetd's default listen address),
// -key, -json, -timeout and the TLS flags on fs.
func (c *StatusCommand) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", wellknown.LoopbackAddr(wellknown.BudgetdPort), "address of any budgetd replica")
	fs.StringVar(&c.Key, "key", "", "budget key to describe (default: all)")
	fs.BoolVar(&c.JSON, "json", false, "print JSON instead of tables")
	fs.DurationVar(&c.Timeout, "timeout", 5*time.Second, "give up after this long")
	c.TLS.AddFlags(fs)
}

// Run asks the replica at Addr, as the admin identity (or in plaintext with
// -insecure), and writes its answer to w as budgetstatus.Write does, within
// Timeout.
func (c *StatusCommand) Run(ctx context.Context, w io.Writer) error {
	id, err := c.TLS.Load(mtls.IdentityAdmin, mtls.Options{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	resp, err := QueryStatus(ctx, c.Addr, c.Key, id)
	if err != nil {
		return err
	}
	return budgetstatus.Write(w, resp, c.JSON)
}
