// Package callmeta is Levee's wire contract beyond the protobuf messages: the
// facts about a request that every hop needs for its shedding and retry
// decisions — which attempt this is, how urgent it is, and on whose behalf
// it is made — as gRPC request metadata, and the answer's trailers: gRPC's
// pushback and a verifier's account of how it served a call (answer.go).
// Every component reads and writes them here and nowhere else.
//
// The request's wire form is three metadata keys, each holding at most one value:
//
//	levee-attempt   decimal 1..100, no sign or leading zero; 1 is the first attempt
//	levee-priority  "critical", "interactive" or "batch"
//	levee-tenant    1..64 bytes of [A-Za-z0-9._-]
//
// A missing key means its default: attempt 1, priority Interactive, no
// tenant. A present but malformed value is an error, never silently
// defaulted: a caller that believes it sent "batch" must not be served as
// Interactive. Parsing looks at a value's length before its content, so an
// oversized value costs no more than a short one.
package callmeta

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/grpc/metadata"
)

// The metadata keys of the facts.
const (
	AttemptKey  = "levee-attempt"
	PriorityKey = "levee-priority"
	TenantKey   = "levee-tenant"
	// WeightKey carries the tenant's weight from a gateway to a verifier:
	// the gateway's configured weight for the call's tenant
	// (tenant_weights), which the verifier's fair queueing serves by. It
	// is never a caller's: the gateway replaces whatever a caller sent.
	WeightKey = "levee-tenant-weight"
)

// Bounds on the values.
const (
	MaxAttempt   = 100 // highest attempt number accepted
	MaxTenantLen = 64  // longest tenant name accepted, in bytes
	MaxWeight    = 1e6 // largest tenant weight accepted
	maxWeightLen = 24  // longest weight value parsed, in bytes
)

// ErrMalformed is matched (errors.Is) by every error FromIncoming and
// Facts.Validate return. Those errors are *MalformedError values naming the
// key at fault.
var ErrMalformed = errors.New("callmeta: malformed request metadata")

// ErrUnknownPriority is returned by ParsePriority for a string that names no
// priority.
var ErrUnknownPriority = errors.New("callmeta: unknown priority")

// MalformedError describes one malformed value. Its message names the key
// and the problem and quotes at most a short prefix of the value, so it is
// safe to return to the caller and bounded in size.
type MalformedError struct {
	Key     string // AttemptKey, PriorityKey, TenantKey or WeightKey
	Problem string // what is wrong with the value
}

func (e *MalformedError) Error() string {
	return "callmeta: " + e.Key + ": " + e.Problem
}

// Is makes a *MalformedError match ErrMalformed.
func (e *MalformedError) Is(target error) bool { return target == ErrMalformed }

// Priority says how urgent a request is; the shedding order is Batch first,
// then Interactive, then Critical.
type Priority uint8

// The priorities. PriorityUnspecified is the zero value: a Facts that does
// not set one. FromIncoming never returns it: a request without a priority
// is Interactive.
const (
	PriorityUnspecified Priority = iota
	Critical                     // sustains sessions; shed last
	Interactive                  // a person is waiting; the default
	Batch                        // nobody is waiting; shed first
)

// String returns the wire name of p ("critical", "interactive", "batch"),
// "unspecified" for PriorityUnspecified, and "Priority(N)" for values
// outside the enumeration. The set of results for valid values is bounded,
// so it can be used as a metric label.
func (p Priority) String() string {
	switch p {
	case PriorityUnspecified:
		return "unspecified"
	case Critical:
		return "critical"
	case Interactive:
		return "interactive"
	case Batch:
		return "batch"
	}
	return "Priority(" + strconv.Itoa(int(p)) + ")"
}

// ParsePriority returns the priority whose wire name is s. Matching is exact
// (lower case, no surrounding space); "unspecified" is not a wire name. Any
// other string is an error wrapping ErrUnknownPriority.
func ParsePriority(s string) (Priority, error) {
	switch s {
	case "critical":
		return Critical, nil
	case "interactive":
		return Interactive, nil
	case "batch":
		return Batch, nil
	}
	return PriorityUnspecified, fmt.Errorf("%w %s", ErrUnknownPriority, quote(s))
}

// Facts are the request facts one hop passes to the next.
type Facts struct {
	// Attempt numbers the tries of one logical request: 1 for the first,
	// 2 and up for retries. Zero means unset.
	Attempt int
	// Priority of the request; PriorityUnspecified means unset.
	Priority Priority
	// Tenant names whoever the request is made for, as the caller chose
	// it. Empty means none.
	Tenant string
	// Weight is the tenant's weight, in (0, MaxWeight], set by a gateway
	// for the verifier it forwards to. Zero means unset: weight 1.
	Weight float64
}

// defaults are the facts of a request that carries none.
var defaults = Facts{Attempt: 1, Priority: Interactive}

// The attempt classes AttemptClass returns.
const (
	FirstAttempt = "first"
	RetryAttempt = "retry"
)

// AttemptClass returns FirstAttempt for a first attempt (or an unset one)
// and RetryAttempt otherwise: a bounded label value for metrics and
// shedding.
func (f Facts) AttemptClass() string {
	if f.Attempt <= 1 {
		return FirstAttempt
	}
	return RetryAttempt
}

// Validate reports whether f can be sent as it is: unset fields are fine
// (they are left out and read back as defaults); set ones must be within the
// bounds FromIncoming accepts. The error is a *MalformedError.
func (f Facts) Validate() error {
	switch {
	case f.Attempt < 0:
		return &MalformedError{Key: AttemptKey, Problem: strconv.Itoa(f.Attempt) + " is below 1"}
	case f.Attempt > MaxAttempt:
		return &MalformedError{Key: AttemptKey, Problem: strconv.Itoa(f.Attempt) + " is above " + strconv.Itoa(MaxAttempt)}
	}
	if f.Priority > Batch {
		return &MalformedError{Key: PriorityKey, Problem: f.Priority.String() + " is not a priority"}
	}
	if problem := tenantProblem(f.Tenant); problem != "" {
		return &MalformedError{Key: TenantKey, Problem: problem}
	}
	if f.Weight != 0 {
		if problem := weightProblem(f.Weight); problem != "" {
			return &MalformedError{Key: WeightKey, Problem: problem}
		}
	}
	return nil
}

// FromIncoming reads the facts from the incoming gRPC metadata of ctx.
// Missing keys get their defaults (Attempt 1, Priority Interactive, Tenant
// ""); an empty tenant value counts as missing. A malformed value — attempt
// not a canonical decimal in 1..MaxAttempt, an unknown priority, a tenant
// longer than MaxTenantLen or with a byte outside [A-Za-z0-9._-], a weight
// that is not a number in (0, MaxWeight], or any key given more than one
// value — is a *MalformedError naming the key. The
// caller is expected to answer it with codes.InvalidArgument.
func FromIncoming(ctx context.Context) (Facts, error) {
	f, err := Asked(ctx)
	if err != nil {
		return Facts{}, err
	}
	return f.withDefaults(), nil
}

// withDefaults is f with each unset field (Attempt 0, PriorityUnspecified)
// set to its default.
func (f Facts) withDefaults() Facts {
	if f.Attempt == 0 {
		f.Attempt = defaults.Attempt
	}
	if f.Priority == PriorityUnspecified {
		f.Priority = defaults.Priority
	}
	return f
}

// Asked reads the facts as the incoming gRPC metadata of ctx states them,
// as FromIncoming does, but leaves a missing key unset (Attempt 0,
// PriorityUnspecified, Tenant ""): what a caller asked for, which a server
// that binds facts to the caller's identity must tell from a default.
func Asked(ctx context.Context) (Facts, error) {
	var f Facts
	if v, ok, err := single(ctx, AttemptKey); err != nil {
		return Facts{}, err
	} else if ok {
		n, problem := parseAttempt(v)
		if problem != "" {
			return Facts{}, &MalformedError{Key: AttemptKey, Problem: problem}
		}
		f.Attempt = n
	}
	if v, ok, err := single(ctx, PriorityKey); err != nil {
		return Facts{}, err
	} else if ok {
		p, err := ParsePriority(v)
		if err != nil {
			return Facts{}, &MalformedError{Key: PriorityKey, Problem: quote(v) + " is not critical, interactive or batch"}
		}
		f.Priority = p
	}
	if v, ok, err := single(ctx, TenantKey); err != nil {
		return Facts{}, err
	} else if ok {
		if problem := tenantProblem(v); problem != "" {
			return Facts{}, &MalformedError{Key: TenantKey, Problem: problem}
		}
		f.Tenant = v
	}
	if v, ok, err := single(ctx, WeightKey); err != nil {
		return Facts{}, err
	} else if ok {
		w, problem := parseWeight(v)
		if problem != "" {
			return Facts{}, &MalformedError{Key: WeightKey, Problem: problem}
		}
		f.Weight = w
	}
	return f, nil
}

// single returns the one value of key in ctx's incoming metadata, whether
// there is one, and an error when there are several.
func single(ctx context.Context, key string) (string, bool, error) {
	vs := metadata.ValueFromIncomingContext(ctx, key)
	switch len(vs) {
	case 0:
		return "", false, nil
	case 1:
		return vs[0], true, nil
	}
	return "", false, &MalformedError{Key: key, Problem: strconv.Itoa(len(vs)) + " values, want at most 1"}
}

// parseAttempt parses a canonical decimal in 1..MaxAttempt. It returns a
// problem description instead of an error so that the caller builds one
// error, not two.
func parseAttempt(s string) (int, string) {
	const maxDigits = 3 // len("100")
	switch {
	case s == "":
		return 0, "empty value, want a decimal integer 1.." + strconv.Itoa(MaxAttempt)
	case len(s) > maxDigits:
		return 0, quote(s) + " is not a decimal integer 1.." + strconv.Itoa(MaxAttempt)
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, quote(s) + " is not a decimal integer 1.." + strconv.Itoa(MaxAttempt)
		}
		n = n*10 + int(c-'0')
	}
	switch {
	case n == 0:
		return 0, quote(s) + " is below 1"
	case s[0] == '0':
		return 0, quote(s) + " has a leading zero"
	case n > MaxAttempt:
		return 0, quote(s) + " is above " + strconv.Itoa(MaxAttempt)
	}
	return n, ""
}

// parseWeight parses a decimal number in (0, MaxWeight].
func parseWeight(s string) (float64, string) {
	if len(s) > maxWeightLen {
		return 0, quote(s) + " is not a number in (0, 1e6]"
	}
	w, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, quote(s) + " is not a number in (0, 1e6]"
	}
	if problem := weightProblem(w); problem != "" {
		return 0, problem
	}
	return w, ""
}

// weightProblem describes what is wrong with weight w, or returns "".
func weightProblem(w float64) string {
	if !(w > 0 && w <= MaxWeight) { // NaN fails too
		return strconv.FormatFloat(w, 'g', -1, 64) + " is not in (0, 1e6]"
	}
	return ""
}

// tenantProblem describes what is wrong with tenant name s, or returns "".
func tenantProblem(s string) string {
	if len(s) > MaxTenantLen {
		return strconv.Itoa(len(s)) + " bytes, longer than " + strconv.Itoa(MaxTenantLen)
	}
	for i := 0; i < len(s); i++ {
		if !tenantByte(s[i]) {
			return fmt.Sprintf("%s: byte 0x%02x at offset %d is not in [A-Za-z0-9._-]", quote(s), s[i], i)
		}
	}
	return ""
}

func tenantByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}

// quote quotes a value for an error message, eliding all but a short prefix
// of a long one: messages stay bounded whatever a caller sends.
func quote(s string) string {
	const show = 32
	if len(s) <= show {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:show]) + "... (" + strconv.Itoa(len(s)) + " bytes)"
}

// AppendOutgoing returns ctx with f written into its outgoing metadata,
// replacing whatever levee-* values it held and leaving other keys alone.
// Unset fields (Attempt 0, PriorityUnspecified, Tenant "", Weight 0) are left out, and
// the receiver reads its defaults; their previous values are removed all the
// same. f is written as it is: facts that fail Validate are refused by the
// receiving interceptor with codes.InvalidArgument.
func AppendOutgoing(ctx context.Context, f Facts) context.Context {
	md, ok := metadata.FromOutgoingContext(ctx) // a copy: safe to modify
	if !ok {
		md = make(metadata.MD, 3)
	}
	setOrDelete(md, AttemptKey, f.Attempt != 0, func() string { return strconv.Itoa(f.Attempt) })
	setOrDelete(md, PriorityKey, f.Priority != PriorityUnspecified, f.Priority.String)
	setOrDelete(md, TenantKey, f.Tenant != "", func() string { return f.Tenant })
	setOrDelete(md, WeightKey, f.Weight != 0, func() string { return strconv.FormatFloat(f.Weight, 'g', -1, 64) })
	return metadata.NewOutgoingContext(ctx, md)
}

func setOrDelete(md metadata.MD, key string, set bool, value func() string) {
	if set {
		md.Set(key, value())
	} else {
		md.Delete(key)
	}
}

type factsKey struct{}

// NewContext returns ctx carrying f, for FromContext. The server
// interceptors call it; tests and in-process callers may too.
func NewContext(ctx context.Context, f Facts) context.Context {
	return context.WithValue(ctx, factsKey{}, f)
}

// FromContext returns the facts stored in ctx by the server interceptors,
// or the defaults (Attempt 1, Priority Interactive, no tenant) when there
// are none.
func FromContext(ctx context.Context) Facts {
	if f, ok := ctx.Value(factsKey{}).(Facts); ok {
		return f
	}
	return defaults
}
