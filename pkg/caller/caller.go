// Package caller binds what a caller of the gateway asserts to who its
// certificate says it is. A call's tenant and priority decide what it gets
// beside everyone else's calls, so neither may be the caller's word alone:
//
//   - Who calls: a verified client certificate naming a tenant
//     (urn:levee:tenant:NAME, mtls.Tenant). Without a certificate a call is
//     refused with UNAUTHENTICATED, unless Rules.AllowAnonymous; then it
//     is tenant AnonymousTenant at priority batch at most. A certificate
//     of the CA that names no tenant (a component's or the admin's) is
//     refused with PERMISSION_DENIED: it is not a caller.
//   - Its tenant: the certificate's. A call may name it in levee-tenant;
//     naming another is refused with PERMISSION_DENIED, except for a front
//     end (mtls.RoleFrontend), which serves many applications and names
//     each call's tenant.
//   - Its priority: the certificate's urn:levee:priority: is the highest
//     it may ask for (Interactive when the certificate names none; Batch
//     when it names one this package does not know: a misissued grant
//     never widens). A call may ask for that or less in levee-priority;
//     asking for more is refused with PERMISSION_DENIED, never quietly
//     lowered (a caller that believes it sent critical must find out). A
//     call that asks nothing gets Interactive, or the ceiling if lower.
//
// With Rules.Plaintext (a fleet run with -insecure, a trusted network)
// there is no identity to bind to, and the facts pass as sent.
package caller

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/mtls"
)

// AnonymousTenant is the tenant of every caller without a certificate, when
// Rules.AllowAnonymous lets them in.
const AnonymousTenant = "anonymous"

// Rules say whom the gateway serves.
type Rules struct {
	// AllowAnonymous serves callers without a client certificate, all as
	// one tenant (AnonymousTenant) at priority batch at most. Off by
	// default: every caller is someone.
	AllowAnonymous bool
	// Plaintext is a fleet without TLS (-insecure): no caller can be
	// identified, and the facts of each call pass as its metadata states
	// them.
	Plaintext bool
}

// Bind returns the facts the call of ctx is served with: asked (what its
// metadata stated, callmeta.Asked) bound to the caller's certificate as the
// package documentation says, with unset fields set to their defaults; or
// the status that refuses the call.
func (r Rules) Bind(ctx context.Context, asked callmeta.Facts) (callmeta.Facts, error) {
	f := asked
	if f.Attempt == 0 {
		f.Attempt = 1
	}
	if r.Plaintext {
		if f.Priority == callmeta.PriorityUnspecified {
			f.Priority = callmeta.Interactive
		}
		return f, nil
	}
	who, ok := mtls.PeerOf(ctx)
	tenant, ceiling, namesTenants := who.Tenant, ceilingOf(who.Priority), who.Has(mtls.RoleFrontend)
	switch {
	case !ok && !r.AllowAnonymous:
		return callmeta.Facts{}, status.Error(codes.Unauthenticated,
			"the gateway serves callers with a client certificate naming their tenant; the call came without one")
	case !ok:
		tenant, ceiling, namesTenants = AnonymousTenant, callmeta.Batch, false
	case tenant == "":
		return callmeta.Facts{}, status.Error(codes.PermissionDenied,
			"the client certificate names no tenant (urn:levee:tenant:): it is not a caller's")
	case (callmeta.Facts{Tenant: tenant}).Validate() != nil:
		// Issued by the fleet's CA, but not a name levee-tenant could
		// carry: it would reach logs, labels and shares unchecked.
		return callmeta.Facts{}, status.Errorf(codes.PermissionDenied,
			"the client certificate's tenant is not a valid tenant name (1..%d bytes of [A-Za-z0-9._-]); reissue it", callmeta.MaxTenantLen)
	}
	switch {
	case f.Tenant == "":
		f.Tenant = tenant
	case f.Tenant != tenant && !namesTenants:
		return callmeta.Facts{}, status.Errorf(codes.PermissionDenied,
			"%s names tenant %q; this caller's certificate is tenant %q, and only a front end may name another",
			callmeta.TenantKey, f.Tenant, tenant)
	}
	switch {
	case f.Priority == callmeta.PriorityUnspecified:
		f.Priority = max(callmeta.Interactive, ceiling) // a larger Priority is less urgent
	case f.Priority < ceiling:
		return callmeta.Facts{}, status.Errorf(codes.PermissionDenied,
			"%s asks for %s; this caller may ask for %s at most", callmeta.PriorityKey, f.Priority, ceiling)
	}
	return f, nil
}

// ceilingOf is the highest priority a certificate's urn:levee:priority:
// name allows: Interactive for none, Batch for a name that is no priority.
func ceilingOf(name string) callmeta.Priority {
	if name == "" {
		return callmeta.Interactive
	}
	p, err := callmeta.ParsePriority(name)
	if err != nil {
		return callmeta.Batch
	}
	return p
}

// Interceptors are the server interceptors of a port whose callers are
// bound by r: a unary call to one of methods has its facts read
// (callmeta.Asked; a malformed one is INVALID_ARGUMENT) and bound with r,
// and its handler runs with the bound facts in its context
// (callmeta.FromContext). Health and reflection (mtls.OpenServices) are
// served as they are, to anyone who completed the handshake. Every other
// method is refused with PERMISSION_DENIED: a service registered later is
// closed until it is named here.
func (r Rules) Interceptors(methods ...string) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	bound := make(map[string]bool, len(methods))
	for _, m := range methods {
		bound[m] = true
	}
	open := mtls.Policy{Open: mtls.OpenServices}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !bound[info.FullMethod] {
			if err := open.Check(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return handler(ctx, req)
		}
		asked, err := callmeta.Asked(ctx)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		f, err := r.Bind(ctx, asked)
		if err != nil {
			return nil, err
		}
		return handler(callmeta.NewContext(ctx, f), req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := open.Check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
	return unary, stream
}
