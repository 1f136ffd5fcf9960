package cluster

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	pbresource "trellis.dev/trellis/api/resource/v1"
	raftstore "trellis.dev/trellis/internal/storage/raft"
	"trellis.dev/trellis/internal/testlog"
)

func testTuning() raftstore.Tuning {
	return raftstore.Tuning{
		HeartbeatTimeout:   400 * time.Millisecond,
		ElectionTimeout:    400 * time.Millisecond,
		LeaderLeaseTimeout: 300 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
		HoldTimeout:        10 * time.Second,
	}
}

func testLogger(t testing.TB) *slog.Logger { return testlog.Logger(t) }

// listen reserves a loopback port for a server's gRPC listener.
func listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var lis net.Listener
	var err error
	// A port just released by a stopped server may take a moment to free.
	eventually(t, 10*time.Second, "listening on "+addr, func() bool {
		lis, err = net.Listen("tcp", addr)
		return err == nil
	})
	return lis
}

// server is an in-process trellis server: a Cluster on a gRPC server.
type server struct {
	t   testing.TB
	cfg Config
	c   *Cluster
	srv *grpc.Server

	cancel   context.CancelFunc
	runDone  chan struct{}
	srvDone  chan struct{}
	stopOnce sync.Once
}

func startServer(t testing.TB, lis net.Listener, cfg Config) *server {
	t.Helper()
	cfg.ServerAddr = lis.Addr().String()
	if cfg.RaftAddr == "" {
		cfg.RaftAddr = "127.0.0.1:0"
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = 50 * time.Millisecond
		cfg.RetryMaxInterval = time.Second
	}
	c, err := New(cfg)
	if err != nil {
		lis.Close()
		t.Fatalf("new server: %v", err)
	}
	s := &server{t: t, cfg: cfg, c: c, srv: grpc.NewServer(), runDone: make(chan struct{}), srvDone: make(chan struct{})}
	c.RegisterGRPC(s.srv)
	go func() { defer close(s.srvDone); _ = s.srv.Serve(lis) }()
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { defer close(s.runDone); _ = c.Run(ctx) }()
	t.Cleanup(s.stop)
	return s
}

func (s *server) stop() {
	s.stopOnce.Do(func() {
		s.cancel()
		<-s.runDone
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := s.c.Shutdown(ctx); err != nil {
			s.t.Logf("shutdown %s: %v", s.c.ID(), err)
		}
		s.srv.Stop()
		<-s.srvDone
	})
}

// restart stops the server and starts it again with the same data dir and
// addresses (raftAddr overrides the Raft address when not empty).
func (s *server) restart(raftAddr string) *server {
	s.stop()
	cfg := s.cfg
	cfg.RaftAddr = s.c.Backend().RaftAddr()
	if raftAddr != "" {
		cfg.RaftAddr = raftAddr
	}
	return startServer(s.t, listen(s.t, s.cfg.ServerAddr), cfg)
}

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

func waitReady(t testing.TB, servers ...*server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range servers {
		if err := s.c.WaitReady(ctx); err != nil {
			t.Fatalf("%s not ready: %v", s.c.ID(), err)
		}
	}
}

func leaderAmong(t testing.TB, servers []*server) *server {
	t.Helper()
	var found *server
	eventually(t, 30*time.Second, "a leader is elected", func() bool {
		for _, s := range servers {
			if s.c.Backend().IsLeader() {
				found = s
				return true
			}
		}
		return false
	})
	waitReady(t, found)
	return found
}

func others(servers []*server, not *server) []*server {
	var out []*server
	for _, s := range servers {
		if s != not {
			out = append(out, s)
		}
	}
	return out
}

var testType = &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Thing"}

func testID(name string) *pbresource.ID {
	return &pbresource.ID{Type: testType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: name, Uid: "uid-" + name}
}

func testResource(name string) *pbresource.Resource {
	return &pbresource.Resource{Id: testID(name)}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
