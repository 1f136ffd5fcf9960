package raft

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
	"trellis.dev/trellis/internal/testlog"
)

// testTuning makes elections fast on loopback while staying tolerant of a
// busy machine running the race detector.
func testTuning() Tuning {
	return Tuning{
		HeartbeatTimeout:   400 * time.Millisecond,
		ElectionTimeout:    400 * time.Millisecond,
		LeaderLeaseTimeout: 300 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
		HoldTimeout:        10 * time.Second,
	}
}

func testLogger(t testing.TB) *slog.Logger { return testlog.Logger(t) }

// node is one in-process server: a Backend and a gRPC server with its
// forwarding service, on loopback ports.
type node struct {
	t        testing.TB
	id       string
	dir      string
	raftAddr string
	grpcAddr string
	tuning   Tuning
	logger   *slog.Logger
	storeOpt []inmem.Option

	b    *Backend
	srv  *grpc.Server
	done chan struct{}
}

func startNode(t testing.TB, id, dir, raftAddr, grpcAddr string, tuning Tuning, logger *slog.Logger, storeOpts ...inmem.Option) *node {
	t.Helper()
	var lis net.Listener
	if grpcAddr == "" {
		lis = listenBelowEphemeral(t)
	} else {
		var err error
		if lis, err = net.Listen("tcp", grpcAddr); err != nil {
			t.Fatalf("listen %s: %v", grpcAddr, err)
		}
	}
	if raftAddr == "" {
		l := listenBelowEphemeral(t)
		raftAddr = l.Addr().String()
		l.Close()
	}
	b, err := Open(Config{
		ID: id, DataDir: dir, RaftAddr: raftAddr, ServerAddr: lis.Addr().String(),
		Logger: logger.With("server", id), Tuning: tuning, StoreOptions: storeOpts,
		Sealed: func(typ *pbresource.Type) bool { return ids.SameType(typ, sealedType) },
	})
	if err != nil {
		lis.Close()
		t.Fatalf("open %s: %v", id, err)
	}
	n := &node{t: t, id: id, dir: dir, raftAddr: b.RaftAddr(), grpcAddr: lis.Addr().String(), tuning: tuning, logger: logger,
		storeOpt: storeOpts, b: b, srv: grpc.NewServer(), done: make(chan struct{})}
	b.RegisterGRPC(n.srv)
	go func() { defer close(n.done); _ = n.srv.Serve(lis) }()
	t.Cleanup(n.stop)
	return n
}

// listenBelowEphemeral listens on a loopback port below Linux's ephemeral
// range (32768 and up). A node restarts on the addresses it had, and a
// port from the ephemeral range, free while it was down, may meanwhile be
// the local end of another test's outgoing connection: "address already
// in use". Ports below the range are never given out that way.
func listenBelowEphemeral(t testing.TB) net.Listener {
	t.Helper()
	for range 100 {
		port := 20000 + rand.IntN(12000)
		if lis, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			return lis
		}
	}
	t.Fatal("no free loopback port between 20000 and 32000")
	return nil
}

// stop shuts the server down (idempotent).
func (n *node) stop() {
	n.srv.Stop()
	<-n.done
	if err := n.b.Shutdown(); err != nil {
		n.t.Logf("shutdown %s: %v", n.id, err)
	}
}

// restart starts the server again on the same addresses and data dir.
func (n *node) restart() *node {
	n.stop()
	return startNode(n.t, n.id, n.dir, n.raftAddr, n.grpcAddr, n.tuning, n.logger, n.storeOpt...)
}

// startCluster starts size servers and bootstraps them as one cluster.
func startCluster(t testing.TB, size int, durable bool, tuning Tuning) []*node {
	t.Helper()
	return startClusterOpts(t, size, durable, tuning, nil)
}

// startClusterWith starts an in-memory cluster whose stores take opts.
func startClusterWith(t testing.TB, size int, tuning Tuning, opts []inmem.Option) []*node {
	t.Helper()
	return startClusterOpts(t, size, false, tuning, opts)
}

func startClusterOpts(t testing.TB, size int, durable bool, tuning Tuning, opts []inmem.Option) []*node {
	t.Helper()
	logger := testLogger(t)
	nodes := make([]*node, size)
	var servers []Server
	for i := range nodes {
		dir := ""
		if durable {
			dir = t.TempDir()
		}
		nodes[i] = startNode(t, fmt.Sprintf("s%d", i+1), dir, "", "", tuning, logger, opts...)
		servers = append(servers, nodes[i].b.Self())
	}
	for _, n := range nodes {
		if err := n.b.Bootstrap(servers); err != nil {
			t.Fatalf("bootstrap %s: %v", n.id, err)
		}
	}
	waitReady(t, nodes...)
	return nodes
}

// waitReady waits until every node can serve requests.
func waitReady(t testing.TB, nodes ...*node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range nodes {
		if err := n.b.WaitReady(ctx); err != nil {
			t.Fatalf("%s not ready: %v", n.id, err)
		}
	}
}

// leaderOf returns the node that is the announced leader, waiting for one.
func leaderOf(t testing.TB, nodes []*node) *node {
	t.Helper()
	var found *node
	eventually(t, 30*time.Second, "a leader is elected", func() bool {
		for _, n := range nodes {
			if n.b.IsLeader() && n.b.lead.readyIn(n.b.raft.CurrentTerm()) {
				found = n
				return true
			}
		}
		return false
	})
	return found
}

func followersOf(nodes []*node, leader *node) []*node {
	var out []*node
	for _, n := range nodes {
		if n != leader {
			out = append(out, n)
		}
	}
	return out
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var testType = &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Thing"}

// sealedType is sealed on every test server (Config.Sealed).
var sealedType = &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Sealed"}

func testID(name string) *pbresource.ID {
	return &pbresource.ID{Type: testType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: name, Uid: "uid-" + name}
}

func testResource(name string) *pbresource.Resource {
	return &pbresource.Resource{Id: testID(name), Metadata: map[string]string{"name": name}}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustWrite creates or updates a resource through b.
func mustWrite(t testing.TB, b storage.Backend, res *pbresource.Resource) *pbresource.Resource {
	t.Helper()
	out, err := b.WriteCAS(ctxT(t), res)
	if err != nil {
		t.Fatalf("write %s: %v", res.GetId().GetName(), err)
	}
	return out
}
