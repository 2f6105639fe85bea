// Package grpctest serves gRPC services over real loopback sockets for
// tests.
package grpctest

import (
	"net"
	"testing"

	"google.golang.org/grpc"
)

// Serve starts a gRPC server built with opts on a free loopback port, with
// the services register adds, and returns its address. The server stops
// when the test ends, and its serving goroutine has returned by then.
func Serve(t testing.TB, register func(*grpc.Server), opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	register(s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return lis.Addr().String()
}
