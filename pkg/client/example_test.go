package client_test

import (
	"context"
	"log"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leveehq/levee/pkg/budget"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/client"
)

// A caller wires the SDK to the fleet-wide retry budget and calls Verify.
func Example() {
	bcfg := budget.DefaultConfig()
	bcfg.Target = "dns:///budgetd.internal:7801"
	budgets, err := budget.New(bcfg)
	if err != nil {
		log.Fatal(err)
	}
	defer budgets.Close()
	b, err := budgets.Key("verify")
	if err != nil {
		log.Fatal(err)
	}

	cc, err := grpc.NewClient("dns:///levee-gateway.internal:7700",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry()) // only the SDK retries
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()

	cfg := client.DefaultConfig()
	cfg.Budget = b
	levee, err := client.New(cc, cfg)
	if err != nil {
		log.Fatal(err)
	}
	verdict, err := levee.Verify(context.Background(), "$argon2id$v=19$...", []byte("hunter2"),
		client.WithPriority(callmeta.Critical))
	if err != nil {
		log.Printf("verify: %v", err) // a gRPC status error; errors.Is tells why no retry
		return
	}
	if verdict.NeedsRehash {
		_, _ = levee.Hash(context.Background(), []byte("hunter2"))
	}
}
