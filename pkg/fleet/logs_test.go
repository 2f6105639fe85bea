package fleet

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/verifier"
	"github.com/leveehq/levee/pkg/verify"
)

// lockedBuffer is a log sink shared by every component.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A whole fleet run with mutual TLS and a pepper, every component logging
// at debug level, through hashes, matches, mismatches, a rehash, bad input,
// a hash under a pepper key the fleet does not hold and a certificate
// rotation: no log line carries a password, a pepper key, a private key or
// a full hash, in any encoding the fleet could have written it.
func TestNoSecretInAnyLog(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, err := mtls.NewCA("test CA", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	set := mtls.DevelopmentSet{Dir: dir, ValidFor: 24 * time.Hour}
	if err := ca.WriteSet(set, now); err != nil {
		t.Fatal(err)
	}
	pepperKey := []byte("pepper key material, 32 bytes!!!")
	peppers, err := verify.NewPeppers("k1", verify.Pepper{ID: "k1", Key: pepperKey})
	if err != nil {
		t.Fatal(err)
	}

	var logs lockedBuffer
	cfg := testConfig(t, "")
	cfg.TLSDir = dir
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.MutateVerifier = func(_ int, c *verifier.Config) { c.Peppers = peppers }

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ready := make(chan Addresses, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, func(a Addresses) { ready <- a }) }()
	var a Addresses
	select {
	case a = <-ready:
	case err := <-done:
		t.Fatalf("fleet ended before it was ready: %v", err)
	case <-ctx.Done():
		t.Fatal("fleet not ready within the test's deadline")
	}
	client, err := mtls.Settings{Dir: dir}.Load(mtls.IdentityClient, mtls.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(a.Gateway, client.DialOption(""))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rpc := verifyv1.NewVerifyServiceClient(cc)
	call := func(f func(context.Context) error) {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		_ = f(cctx) // refusals are part of the run: only the logs are judged
	}

	password := "correct horse battery staple 7731"
	wrong := "tr0ub4dor&3 wrong guess 5519"
	var hashes []string
	call(func(ctx context.Context) error {
		h, err := rpc.Hash(ctx, &verifyv1.HashRequest{Password: []byte(password)})
		if err == nil {
			hashes = append(hashes, h.GetEncodedHash())
		}
		return err
	})
	if len(hashes) == 0 {
		t.Fatal("Hash through the gateway failed: the run exercised nothing")
	}
	// A weaker stored hash, unpeppered, that the fleet rehashes.
	plain, err := verify.New(verify.Policy{Params: verify.Params{Memory: 32, Iterations: 1, Parallelism: 1}, SaltLen: 16, KeyLen: 32},
		verify.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	weak, err := plain.HashPassword([]byte(password), strings.NewReader(strings.Repeat("s", 64)))
	if err != nil {
		t.Fatal(err)
	}
	hashes = append(hashes, weak.String())
	// A hash under a pepper key the fleet does not hold.
	foreign := strings.Replace(hashes[0], "keyid="+base64.RawStdEncoding.EncodeToString([]byte("k1")),
		"keyid="+base64.RawStdEncoding.EncodeToString([]byte("k9")), 1)
	if foreign == hashes[0] {
		t.Fatalf("the hash %q names no keyid k1", hashes[0])
	}
	for _, h := range hashes {
		for _, pw := range []string{password, wrong} {
			call(func(ctx context.Context) error {
				resp, err := rpc.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: h, Password: []byte(pw), Rehash: true})
				if nh := resp.GetNewHash(); nh != "" {
					hashes = append(hashes, nh)
				}
				return err
			})
		}
	}
	for _, bad := range []string{foreign, hashes[0][:len(hashes[0])-4] + "!!!!", "$argon2id$v=19$m=99999999,t=1,p=1$" + password} {
		call(func(ctx context.Context) error {
			_, err := rpc.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: bad, Password: []byte(password)})
			return err
		})
	}
	keyMaterial := readKeyMaterial(t, dir)
	// Rotate every certificate, and wait for the components to load them.
	set.Force = true
	if err := ca.WriteSet(set, time.Now()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the reload interval is a second
	call(func(ctx context.Context) error {
		_, err := rpc.Hash(ctx, &verifyv1.HashRequest{Password: []byte(password)})
		return err
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("fleet: %v", err)
	}

	out := logs.String()
	if len(out) < 1000 {
		t.Fatalf("the fleet logged %d bytes at debug level: the test watched nothing", len(out))
	}
	secrets := map[string]string{
		"the password":                    password,
		"the wrong password":              wrong,
		"the password, base64":            base64.StdEncoding.EncodeToString([]byte(password)),
		"the pepper key":                  string(pepperKey),
		"the pepper key, base64":          base64.StdEncoding.EncodeToString(pepperKey),
		"the pepper key, unpadded base64": base64.RawStdEncoding.EncodeToString(pepperKey),
		"the pepper key, hex":             hex.EncodeToString(pepperKey),
		"a PEM private key":               "PRIVATE KEY",
	}
	for i, h := range hashes {
		// The digest is what makes a hash worth stealing: its last field.
		secrets["hash "+strconv.Itoa(i)+"'s digest"] = h[strings.LastIndexByte(h, '$')+1:]
	}
	for what, l := range readKeyMaterial(t, dir) {
		keyMaterial["rotated "+what] = l
	}
	for what, l := range keyMaterial {
		secrets[what] = l
	}
	for what, s := range secrets {
		if strings.Contains(out, s) {
			i := strings.Index(out, s)
			line := out[strings.LastIndexByte(out[:i], '\n')+1:]
			if j := strings.IndexByte(line, '\n'); j >= 0 {
				line = line[:j]
			}
			t.Errorf("a log line carries %s: %q", what, line)
		}
	}
	t.Logf("%d bytes of logs from the whole fleet at debug level, %d secrets looked for", len(out), len(secrets))
}

// readKeyMaterial returns a line of base64 from each private key in dir.
func readKeyMaterial(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range mtls.DevelopmentNames() {
		key, err := os.ReadFile(filepath.Join(dir, name+".key"))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(key), "\n") {
			if len(l) >= 32 && !strings.HasPrefix(l, "-----") {
				out[name+".key's material"] = l
			}
		}
	}
	return out
}
