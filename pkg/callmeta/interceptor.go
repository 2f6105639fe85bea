package callmeta

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// UnaryServerInterceptor returns an interceptor that reads the facts once
// with FromIncoming, refuses a call whose facts are malformed with
// codes.InvalidArgument and a message naming the key (the handler does not
// run), and otherwise runs the handler with the facts in its context, where
// FromContext finds them.
func UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		f, err := FromIncoming(ctx)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		return handler(NewContext(ctx, f), req)
	}
}
