package leaves_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"trellis.dev/trellis/internal/agent/failover"
	"trellis.dev/trellis/internal/agent/leaves"
	"trellis.dev/trellis/internal/testlog"
)

// TestServersMoveTheSharedFailover: the cache's link dials the server the
// agent's failover names; a server it cannot reach moves that failover,
// which the agent's session follows too, to the next, where the agent's
// leaf is signed.
func TestServersMoveTheSharedFailover(t *testing.T) {
	srv := startServer(t)
	// An address where nothing listens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()

	shared := failover.New([]string{dead, srv.GRPCAddr()})
	servers := leaves.NewServersOn(shared, testlog.Logger(t), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer servers.Close()
	c, err := leaves.New(leaves.Config{Signer: servers, Datacenter: "dc1", Instance: "i-1", Logger: testlog.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	go servers.WatchRoots(ctx, c.SetRoots)
	go c.Run(ctx)
	if _, _, err := c.Get(ctx, leaves.AgentKey); err != nil {
		t.Fatalf("the agent leaf: %v", err)
	}
	if got := shared.Current(); got != srv.GRPCAddr() {
		t.Fatalf("the shared failover is on %s, want the live server %s", got, srv.GRPCAddr())
	}
}
