package verifier

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"testing"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/verify"
)

// Malformed and hostile input is INVALID_ARGUMENT with a message naming the
// problem, before anything is queued or hashed.
func TestHostileInputRefusedBeforeHashing(t *testing.T) {
	cfg := testConfig()
	cfg.Limits = verify.DefaultLimits() // production caps: 256 MiB, t=8, bcrypt cost 13
	h := start(t, cfg)

	salt := base64.RawStdEncoding.EncodeToString(make([]byte, 16))
	key := base64.RawStdEncoding.EncodeToString(make([]byte, 32))
	argon := func(version, params, salt, key string) string {
		return strings.Join([]string{"", "argon2id", version, params, salt, key}, "$")
	}
	bcryptCost31 := "$2b$31$" + strings.Repeat("a", 22) + strings.Repeat("a", 30) + "."
	tests := []struct {
		name     string
		hash     string
		password []byte
		wantMsg  string
	}{
		{"4 GiB of memory", argon("v=19", "m=4194304,t=1,p=1", salt, key), nil,
			"memory m=4194304 KiB exceeds limit 262144 KiB"},
		{"2^32 iterations", argon("v=19", "m=64,t=4294967296,p=1", salt, key), nil,
			"iterations t=4294967296 exceeds limit 8"},
		{"unknown parameter", argon("v=19", "m=64,t=1,p=1,x=1", salt, key), nil,
			`unknown parameter "x"`},
		{"bad base64 salt", argon("v=19", "m=64,t=1,p=1", "!!!!"+salt[4:], key), nil,
			"salt: illegal base64 character at offset 0"},
		{"padded base64 key", argon("v=19", "m=64,t=1,p=1", salt, key+"="), nil,
			"key: illegal base64 (padding not allowed)"},
		{"version 16", argon("v=16", "m=64,t=1,p=1", salt, key), nil,
			"unsupported version v=16 (only v=19)"},
		{"version field missing (v=16 format)", "$argon2id$m=64,t=1,p=1$" + salt + "$" + key, nil,
			"missing version field"},
		{"password over the limit", argon("v=19", "m=64,t=1,p=1", salt, key), make([]byte, 4097),
			"password too long: 4097 bytes exceeds limit 4096"},
		{"bcrypt cost 31", bcryptCost31, nil,
			"bcrypt: cost 31 exceeds limit 13"},
		{"unsupported algorithm", "$argon2d$v=19$m=64,t=1,p=1$" + salt + "$" + key, nil,
			`unsupported algorithm "argon2d"`},
		{"empty hash", "", nil,
			"empty hash"},
		{"over MaxEncodedLen", argon("v=19", "m=64,t=1,p=1", salt, strings.Repeat("A", 600)), nil,
			"exceeds limit 512 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pw := tt.password
			if pw == nil {
				pw = []byte("pw")
			}
			_, err := h.verify.Verify(as(context.Background(), "hostile"),
				&verifyv1.VerifyRequest{EncodedHash: tt.hash, Password: pw})
			st := wantCode(t, err, codes.InvalidArgument)
			if !strings.Contains(st.Message(), tt.wantMsg) {
				t.Errorf("message %q does not name the problem %q", st.Message(), tt.wantMsg)
			}
		})
	}
	t.Run("Hash with a password over the limit", func(t *testing.T) {
		_, err := h.verify.Hash(as(context.Background(), "hostile"),
			&verifyv1.HashRequest{Password: make([]byte, 4097)})
		st := wantCode(t, err, codes.InvalidArgument)
		if want := "password too long"; !strings.Contains(st.Message(), want) {
			t.Errorf("message %q does not contain %q", st.Message(), want)
		}
	})

	if got := h.hashed(); len(got) != 0 {
		t.Errorf("hashed %q, want nothing", got)
	}
	if got := h.hashCount(); got != 0 {
		t.Errorf("levee_verifier_hashes_total = %v, want 0", got)
	}
	if got := h.dropped(); len(got) != 0 {
		t.Errorf("dropped_total = %v; invalid input is refused before admission, want no drops", got)
	}
}

// The service works: Hash, then Verify with the right and a wrong password;
// weaker and bcrypt hashes match and ask for a rehash; goodput is counted;
// reflection lists the service; every call carries an ORCA load report.
func TestHashAndVerify(t *testing.T) {
	h := start(t, testConfig())
	ctx := context.Background()

	hashed, err := h.verify.Hash(ctx, &verifyv1.HashRequest{Password: []byte("correct horse")})
	wantOK(t, "Hash", err)
	if want := "$argon2id$v=19$m=64,t=1,p=1$"; !strings.HasPrefix(hashed.GetEncodedHash(), want) {
		t.Fatalf("Hash returned %q, want the policy's parameters %q...", hashed.GetEncodedHash(), want)
	}

	weakSalt := make([]byte, 16)
	if _, err := rand.Read(weakSalt); err != nil {
		t.Fatal(err)
	}
	weaker := strings.Join([]string{"", "argon2id", "v=19", "m=32,t=1,p=1",
		base64.RawStdEncoding.EncodeToString(weakSalt),
		base64.RawStdEncoding.EncodeToString(argon2.IDKey([]byte("correct horse"), weakSalt, 1, 32, 1, 32)),
	}, "$")
	bcrypted, err := bcrypt.GenerateFromPassword([]byte("correct horse"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		hash     string
		password string
		want     *verifyv1.VerifyResponse
	}{
		{"own hash, right password", hashed.GetEncodedHash(), "correct horse", &verifyv1.VerifyResponse{Match: true}},
		{"own hash, wrong password", hashed.GetEncodedHash(), "battery staple", &verifyv1.VerifyResponse{}},
		{"weaker argon2id", weaker, "correct horse", &verifyv1.VerifyResponse{Match: true, NeedsRehash: true}},
		{"weaker argon2id, wrong password", weaker, "battery staple", &verifyv1.VerifyResponse{NeedsRehash: true}},
		{"bcrypt", string(bcrypted), "correct horse", &verifyv1.VerifyResponse{Match: true, NeedsRehash: true}},
		{"bcrypt, wrong password", string(bcrypted), "battery staple", &verifyv1.VerifyResponse{NeedsRehash: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := h.verify.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: tt.hash, Password: []byte(tt.password)})
			wantOK(t, "Verify", err)
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("Verify (-want +got):\n%s", diff)
			}
		})
	}

	wantCounts := map[string]float64{"hash": 1, "verify": float64(len(tests))}
	for rpc, want := range wantCounts {
		if got := h.metric("levee_verifier_goodput_total", map[string]string{"rpc": rpc}); got != want {
			t.Errorf("levee_verifier_goodput_total{rpc=%q} = %v, want %v", rpc, got, want)
		}
	}
	wantHashes := map[string]float64{"argon2id": 5, "bcrypt": 2, "argon2i": 0}
	for alg, want := range wantHashes {
		if got := h.metric("levee_verifier_hashes_total", map[string]string{"algorithm": alg}); got != want {
			t.Errorf("levee_verifier_hashes_total{algorithm=%q} = %v, want %v", alg, got, want)
		}
	}
	if got := h.dropped(); len(got) != 0 {
		t.Errorf("dropped_total = %v, want no drops", got)
	}

	t.Run("ORCA load report in the trailer", func(t *testing.T) {
		var trailer metadata.MD
		_, err := h.verify.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: hashed.GetEncodedHash(), Password: []byte("x")},
			grpc.Trailer(&trailer))
		wantOK(t, "Verify", err)
		report := loadReport(t, trailer)
		want := &v3orcapb.OrcaLoadReport{
			NamedMetrics: map[string]float64{"queue_length": 0, "active_workers": 1},
			Utilization:  map[string]float64{"queue": 0},
		}
		// Utilization and QPS depend on what is running when the report is
		// made; what must be there is the shape and the queue's state.
		if diff := cmp.Diff(want, report, protocmp.Transform(),
			protocmp.IgnoreFields(&v3orcapb.OrcaLoadReport{}, "application_utilization", "rps_fractional")); diff != "" {
			t.Errorf("load report (-want +got):\n%s", diff)
		}
		if got := trailer.Get(callmeta.WorkersKey); len(got) != 1 || got[0] != "1" {
			t.Errorf("trailer %s = %q, want the 1 active worker", callmeta.WorkersKey, got)
		}
		for _, key := range []string{callmeta.QueueWaitKey, callmeta.ServiceTimeKey} {
			vals := trailer.Get(key)
			if len(vals) != 1 {
				t.Fatalf("trailer %s = %q, want one value", key, vals)
			}
			if us, err := strconv.ParseInt(vals[0], 10, 64); err != nil || us < 0 {
				t.Errorf("trailer %s = %q, want a non-negative integer of microseconds", key, vals[0])
			}
		}
		if us, _ := strconv.ParseInt(trailer.Get(callmeta.ServiceTimeKey)[0], 10, 64); us == 0 {
			t.Errorf("service time trailer is 0 µs for a real Argon2 hash")
		}
	})

	t.Run("reflection lists the service", func(t *testing.T) {
		stream, err := rpb.NewServerReflectionClient(h.cc).ServerReflectionInfo(ctx)
		wantOK(t, "ServerReflectionInfo", err)
		if err := stream.Send(&rpb.ServerReflectionRequest{
			MessageRequest: &rpb.ServerReflectionRequest_ListServices{},
		}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		wantOK(t, "Recv", err)
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		for _, want := range []string{"levee.verify.v1.VerifyService", "levee.verify.v1.VerifierAdminService", "grpc.health.v1.Health"} {
			if !slices.Contains(names, want) {
				t.Errorf("reflection lists %q, want it to include %q", names, want)
			}
		}
	})
}

// loadReport decodes the per-call ORCA load report from a trailer.
func loadReport(t *testing.T, trailer metadata.MD) *v3orcapb.OrcaLoadReport {
	t.Helper()
	vs := trailer.Get("endpoint-load-metrics-bin")
	if len(vs) != 1 {
		t.Fatalf("trailer endpoint-load-metrics-bin has %d values, want 1 (trailer: %v)", len(vs), trailer)
	}
	report := new(v3orcapb.OrcaLoadReport)
	if err := proto.Unmarshal([]byte(vs[0]), report); err != nil {
		t.Fatalf("unmarshal load report: %v", err)
	}
	return report
}
