package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errStopping is the cause of the streams the server ends on shutdown.
var errStopping = errors.New("server shutting down")

// unaryInterceptor turns a panic in a handler into codes.Internal.
func unaryInterceptor(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("grpc handler panicked", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
				resp, err = nil, status.Error(codes.Internal, fmt.Sprintf("internal error: %v", p))
			}
		}()
		return handler(ctx, req)
	}
}

// streamInterceptor turns a panic in a stream handler into codes.Internal,
// and ends every stream when stopping ends: GracefulStop waits for open
// streams, and a watch never ends by itself. A stream ended that way fails
// with Unavailable, which clients retry against another server.
func streamInterceptor(log *slog.Logger, stopping context.Context) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		ctx, cancel := context.WithCancelCause(ss.Context())
		defer cancel(nil)
		stop := context.AfterFunc(stopping, func() { cancel(errStopping) })
		defer stop()
		defer func() {
			if p := recover(); p != nil {
				log.Error("grpc stream handler panicked", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
				err = status.Error(codes.Internal, fmt.Sprintf("internal error: %v", p))
				return
			}
			if err != nil && errors.Is(context.Cause(ctx), errStopping) {
				err = status.Error(codes.Unavailable, "server shutting down: retry against another server, or this one when it is back")
			}
		}()
		return handler(srv, &contextStream{ServerStream: ss, ctx: ctx})
	}
}

type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }
