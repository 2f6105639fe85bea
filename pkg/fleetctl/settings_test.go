package fleetctl_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leveehq/levee/internal/etcdclient"
	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/pkg/fleetctl"
	"github.com/leveehq/levee/pkg/gateway/settings"
)

const settingsKey = "/levee/gateway/config"

func etcdClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := etcdclient.New(etcdclient.Config{Endpoints: etcdtest.StartEtcd(t), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// stored is what the settings key holds now, parsed.
func stored(t *testing.T, cli *clientv3.Client) string {
	t.Helper()
	resp, err := cli.Get(ctxT(t), settingsKey)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read %s: %v, %d values", settingsKey, err, len(resp.Kvs))
	}
	s, err := settings.Parse(resp.Kvs[0].Value)
	if err != nil {
		t.Fatalf("stored settings: %v", err)
	}
	return s.String()
}

// racingKV is a real etcd's KV in which another operator writes between the
// editor's first read and its write.
type racingKV struct {
	clientv3.KV
	once  sync.Once
	other func()
	gets  int
}

func (r *racingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	resp, err := r.KV.Get(ctx, key, opts...)
	r.gets++
	r.once.Do(r.other)
	return resp, err
}

// TestEditSettingsKeepsAConcurrentEdit: an edit made by someone else after
// `set` read the settings and before it wrote them survives: the write is
// refused, and set reads again and merges onto the other edit.
func TestEditSettingsKeepsAConcurrentEdit(t *testing.T) {
	cli := etcdClient(t)
	ctx := ctxT(t)
	if err := fleetctl.EditSettings(ctx, cli, settingsKey, "set", []string{"clamp=40"}, new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	kv := &racingKV{KV: cli, other: func() {
		if err := fleetctl.EditSettings(ctx, cli, settingsKey, "set", []string{"autopilot=false"}, new(bytes.Buffer)); err != nil {
			t.Errorf("the other operator's set: %v", err)
		}
	}}
	if err := fleetctl.EditSettings(ctx, kv, settingsKey, "set", []string{"batch_share=0.4"}, new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	if got, want := stored(t, cli), `{"clamp":40,"batch_share":0.4,"autopilot":false}`; got != want {
		t.Errorf("after two concurrent edits: %s, want %s", got, want)
	}
	if kv.gets != 2 {
		t.Errorf("set read the settings %d times, want 2 (its first write refused)", kv.gets)
	}
}

// TestEditSettings: get, set and delete as `levee settings` runs them; a
// stored value that is invalid is shown as such, and set replaces it.
func TestEditSettings(t *testing.T) {
	cli := etcdClient(t)
	ctx := ctxT(t)
	edit := func(verb string, args ...string) (string, error) {
		var buf bytes.Buffer
		err := fleetctl.EditSettings(ctx, cli, settingsKey, verb, args, &buf)
		return buf.String(), err
	}
	for _, st := range []struct {
		verb, want string
		args       []string
		wantErr    bool
	}{
		{verb: "get", want: "none set"},
		{verb: "set", args: []string{"clamp=40", "client_timeout=3s"}, want: `{"clamp":40,"client_timeout":"3s"}`},
		{verb: "set", args: []string{"autopilot=false"}, want: `{"clamp":40,"autopilot":false,"client_timeout":"3s"}`},
		{verb: "set", args: []string{"clamp=-1"}, want: "clamp must be in", wantErr: true},
		{verb: "set", want: "want name=value", wantErr: true},
		{verb: "get", want: `(revision `},
		{verb: "frob", want: "unknown settings verb", wantErr: true},
		{verb: "delete", want: "deleted"},
		{verb: "get", want: "none set"},
	} {
		out, err := edit(st.verb, st.args...)
		if err != nil {
			out += err.Error()
		}
		if (err != nil) != st.wantErr || !strings.Contains(out, st.want) {
			t.Fatalf("%s %q: %q, %v; want %q (error: %v)", st.verb, st.args, out, err, st.want, st.wantErr)
		}
	}

	if _, err := cli.Put(ctx, settingsKey, `{"clamp": -5}`); err != nil {
		t.Fatal(err)
	}
	if out, err := edit("get"); err != nil || !strings.Contains(out, "is INVALID") {
		t.Errorf("get of an invalid value: %q, %v; want it called INVALID", out, err)
	}
	if _, err := edit("set", "clamp=3"); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, cli); got != `{"clamp":3}` {
		t.Errorf("set over an invalid value: %s, want it replaced outright", got)
	}
}
