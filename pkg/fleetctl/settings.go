package fleetctl

import (
	"context"
	"errors"
	"fmt"
	"io"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leveehq/levee/pkg/gateway/settings"
)

// EditSettings is the command-line side of the gateways' runtime settings
// (package settings), on the etcd key key: "get" prints them, "set" merges
// name=value assignments into them (an atomic read-modify-write: a
// concurrent edit is never lost), "delete" removes them so every gateway
// returns to its configured values. What is written is validated first;
// gateways also validate what they read. kv is an etcd client's KV (a
// *clientv3.Client is one).
func EditSettings(ctx context.Context, kv clientv3.KV, key, verb string, args []string, w io.Writer) error {
	switch verb {
	case "get":
		resp, err := kv.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("read %s: %w", key, err)
		}
		if len(resp.Kvs) == 0 {
			fmt.Fprintf(w, "%s: none set; gateways use their configured values\n", key)
			return nil
		}
		s, err := settings.Parse(resp.Kvs[0].Value)
		if err != nil {
			fmt.Fprintf(w, "%s (revision %d) is INVALID, gateways keep their last good settings: %v\n",
				key, resp.Kvs[0].ModRevision, err)
			return nil
		}
		fmt.Fprintf(w, "%s (revision %d): %s\n", key, resp.Kvs[0].ModRevision, s)
		return nil
	case "set":
		change, err := settings.ParseAssignments(args)
		if err != nil {
			return err
		}
		if len(args) == 0 {
			return errors.New("set: want name=value assignments, e.g. clamp=40")
		}
		for {
			resp, err := kv.Get(ctx, key)
			if err != nil {
				return fmt.Errorf("read %s: %w", key, err)
			}
			var cur settings.Settings
			var rev int64
			if len(resp.Kvs) > 0 {
				rev = resp.Kvs[0].ModRevision
				if cur, err = settings.Parse(resp.Kvs[0].Value); err != nil {
					cur = settings.Settings{} // replace an invalid value outright
				}
			}
			next := cur.Merge(change)
			if err := next.Validate(); err != nil {
				return err
			}
			txn, err := kv.Txn(ctx).
				If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
				Then(clientv3.OpPut(key, next.String())).
				Commit()
			if err != nil {
				return fmt.Errorf("write %s: %w", key, err)
			}
			if txn.Succeeded {
				fmt.Fprintf(w, "%s (revision %d): %s\n", key, txn.Header.Revision, next)
				return nil
			}
		}
	case "delete":
		if _, err := kv.Delete(ctx, key); err != nil {
			return fmt.Errorf("delete %s: %w", key, err)
		}
		fmt.Fprintf(w, "%s deleted; gateways use their configured values\n", key)
		return nil
	}
	return fmt.Errorf("unknown settings verb %q (want get, set or delete)", verb)
}
