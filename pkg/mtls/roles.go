package mtls

import (
	"context"
	"net/url"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// The URI subject alternative names a certificate of the fleet's CA
// carries to say who its holder is:
//
//	urn:levee:role:NAME       a role (RoleAdmin, RoleGateway, ...)
//	urn:levee:tenant:NAME     the tenant a caller of the gateway verifies for
//	urn:levee:priority:NAME   the highest priority that caller may ask for
const (
	rolePrefix     = "urn:levee:role:"
	tenantPrefix   = "urn:levee:tenant:"
	priorityPrefix = "urn:levee:priority:"
)

// Roles of the fleet. Each port serves each method to the roles its Policy
// names, and nothing to anyone else.
const (
	// RoleAdmin may call the admin RPCs (the capacity knob), read
	// budgetd's status, and write the gateways' settings.
	RoleAdmin = "admin"
	// RoleGateway may ask verifiers to Verify and Hash.
	RoleGateway = "gateway"
	// RoleBudget may lease retry tokens from budgetd, under its own name.
	RoleBudget = "budget"
	// RoleBudgetd is a budgetd replica: it may forward leases it has
	// bound to their callers to the leader.
	RoleBudgetd = "budgetd"
	// RoleRead may read budgetd's status.
	RoleRead = "read"
	// RoleFrontend is a front end serving many applications (an identity
	// provider's): it may name the tenant of each call it sends the
	// gateway, which other callers may not.
	RoleFrontend = "frontend"
)

// Role is the URI subject alternative name that grants role.
func Role(role string) *url.URL { return urn(rolePrefix, role) }

// Tenant is the URI subject alternative name that makes a certificate's
// holder a caller of the gateway on behalf of tenant.
func Tenant(tenant string) *url.URL { return urn(tenantPrefix, tenant) }

// Priority is the URI subject alternative name that lets a caller ask for
// priority (a callmeta wire name: critical, interactive, batch) and below.
func Priority(priority string) *url.URL { return urn(priorityPrefix, priority) }

func urn(prefix, name string) *url.URL {
	u, _ := url.Parse(prefix + name)
	return u
}

// conflicting is the Priority of a certificate that names two: no priority
// name, so that a reader of it grants the least (caller: batch).
const conflicting = "conflicting"

// Peer is who a verified client certificate says the caller is.
type Peer struct {
	// Name is the certificate's subject common name.
	Name string
	// Roles are the names of its urn:levee:role: URIs.
	Roles []string
	// Tenant is its urn:levee:tenant: name, "" when it has none: only a
	// certificate with a tenant is a caller of the gateway.
	Tenant string
	// Priority is its urn:levee:priority: name, "" when it has none.
	Priority string
}

// Has reports whether p was granted role.
func (p Peer) Has(role string) bool { return slices.Contains(p.Roles, role) }

// PeerOf returns who the verified client certificate of the gRPC call ctx
// belongs to says the caller is. Ok is false when the call came with no
// verified certificate (plaintext, or TLS without a client certificate).
// A certificate naming two tenants names none (it is no caller), and one
// naming two priorities names one that is no priority, which grants the
// least (a CA that issued it is misconfigured; guessing would widen a
// grant).
func PeerOf(ctx context.Context) (p Peer, ok bool) {
	pr, found := peer.FromContext(ctx)
	if !found {
		return Peer{}, false
	}
	info, isTLS := pr.AuthInfo.(credentials.TLSInfo)
	if !isTLS || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return Peer{}, false
	}
	leaf := info.State.VerifiedChains[0][0]
	p.Name = leaf.Subject.CommonName
	tenants, priorities := 0, 0
	for _, u := range leaf.URIs {
		s := u.String()
		if name, has := strings.CutPrefix(s, rolePrefix); has && name != "" {
			p.Roles = append(p.Roles, name)
		} else if name, has := strings.CutPrefix(s, tenantPrefix); has && name != "" {
			p.Tenant, tenants = name, tenants+1
		} else if name, has := strings.CutPrefix(s, priorityPrefix); has && name != "" {
			p.Priority, priorities = name, priorities+1
		}
	}
	if tenants > 1 {
		p.Tenant = ""
	}
	if priorities > 1 {
		p.Priority = conflicting
	}
	return p, true
}

// Policy says who may call each method of one server. A call to a method it
// names needs a verified client certificate granting one of the method's
// roles; a method of one of the Open services (health, reflection) needs
// only what the handshake demanded; every other method is refused. A
// service registered later is therefore closed until its methods are
// named.
type Policy struct {
	// Methods maps full gRPC method names ("/pkg.Service/Method") to the
	// roles that may call them.
	Methods map[string][]string
	// Open are full service names ("grpc.health.v1.Health") whose methods
	// anyone who completed the handshake may call.
	Open []string
}

// Check returns nil if the caller of ctx may call method, or the status
// that refuses it: UNAUTHENTICATED without a verified client certificate,
// PERMISSION_DENIED for one that grants none of the method's roles, or for
// a method the policy does not name. The messages name the method and the
// roles it needs, never what the certificate holds.
func (p Policy) Check(ctx context.Context, method string) error {
	if p.open(method) {
		return nil
	}
	roles, named := p.Methods[method]
	if !named {
		return status.Errorf(codes.PermissionDenied, "%s is not served on this port", method)
	}
	who, ok := PeerOf(ctx)
	if !ok {
		return status.Errorf(codes.Unauthenticated, "%s needs a client certificate with one of the roles %q; the call came without a verified one", method, roles)
	}
	for _, r := range roles {
		if who.Has(r) {
			return nil
		}
	}
	return status.Errorf(codes.PermissionDenied, "%s needs a client certificate with one of the roles %q", method, roles)
}

// open reports whether method belongs to an Open service.
func (p Policy) open(method string) bool {
	svc, _, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	return ok && slices.Contains(p.Open, svc)
}

// Interceptors are the server interceptors that apply p before any handler
// runs.
func (p Policy) Interceptors() (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := p.Check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := p.Check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
	return unary, stream
}

// OpenServices are the services every Levee port serves to anyone who
// completed its handshake: health and reflection (grpcurl, probes).
var OpenServices = []string{
	"grpc.health.v1.Health",
	"grpc.reflection.v1.ServerReflection",
	"grpc.reflection.v1alpha.ServerReflection",
}
