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

// rolePrefix starts the URI SAN that grants a role: urn:levee:role:admin.
const rolePrefix = "urn:levee:role:"

// Roles of the fleet.
const (
	// RoleAdmin may call the admin RPCs (the capacity knob) and write the
	// gateways' settings.
	RoleAdmin = "admin"
)

// Role is the URI subject alternative name that grants role.
func Role(role string) *url.URL {
	u, _ := url.Parse(rolePrefix + role)
	return u
}

// RolesOf returns the roles granted by the verified client certificate of
// the gRPC call ctx belongs to: the names of its urn:levee:role: URIs. Ok is
// false when the call came with no verified certificate (plaintext, or TLS
// without a client certificate).
func RolesOf(ctx context.Context) (roles []string, ok bool) {
	p, found := peer.FromContext(ctx)
	if !found {
		return nil, false
	}
	info, isTLS := p.AuthInfo.(credentials.TLSInfo)
	if !isTLS || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil, false
	}
	for _, u := range info.State.VerifiedChains[0][0].URIs {
		if name, has := strings.CutPrefix(u.String(), rolePrefix); has && name != "" {
			roles = append(roles, name)
		}
	}
	return roles, true
}

// Authorize returns interceptors that demand role for each of methods (full
// gRPC method names, "/pkg.Service/Method"); every other method passes. A
// call to one of them without a verified client certificate is refused with
// UNAUTHENTICATED, one whose certificate does not grant role with
// PERMISSION_DENIED, before its handler runs.
func Authorize(role string, methods ...string) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	guarded := func(method string) bool { return slices.Contains(methods, method) }
	check := func(ctx context.Context, method string) error {
		if !guarded(method) {
			return nil
		}
		roles, ok := RolesOf(ctx)
		if !ok {
			return status.Errorf(codes.Unauthenticated, "%s needs a client certificate with the %q role; the call came without a verified one", method, role)
		}
		if !slices.Contains(roles, role) {
			return status.Errorf(codes.PermissionDenied, "%s needs the %q role; the client certificate grants %v", method, role, roles)
		}
		return nil
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
	return unary, stream
}
