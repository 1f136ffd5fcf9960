package raft

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// A connection to a server that was down waits out gRPC's reconnect
// backoff (here an hour) and fails every call meanwhile; once Raft says
// that server leads, the pool tries it again at once.
func TestLiveConnSkipsTheReconnectBackoff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // the server is down

	pool := newConnPool([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: grpcbackoff.Config{BaseDelay: time.Hour, Multiplier: 1, MaxDelay: time.Hour}}),
	})
	t.Cleanup(pool.close)
	conn, err := pool.get(addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn.Connect()
	waitState(ctx, t, conn, connectivity.TransientFailure)

	// The server comes back.
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	live, err := pool.live(addr)
	if err != nil || live != conn {
		t.Fatalf("live = %v, %v; want the pooled connection", live, err)
	}
	waitState(ctx, t, conn, connectivity.Ready)
}

func waitState(ctx context.Context, t *testing.T, conn *grpc.ClientConn, want connectivity.State) {
	t.Helper()
	for s := conn.GetState(); s != want; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatalf("connection still %s, want %s", s, want)
		}
	}
}
