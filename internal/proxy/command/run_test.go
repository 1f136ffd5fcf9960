package command

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbproxy "trellis.dev/trellis/api/proxy/v1"
	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/proxy"
	"trellis.dev/trellis/internal/testlog"
)

const (
	testTD   = "11111111-2222-3333-4444-555555555555.trellis"
	testTask = "web-1"
)

// snapshotOf is a valid snapshot of default/web with a fresh leaf of a new
// root of the project's CA code.
func snapshotOf(t *testing.T, version string) *pbproxy.Snapshot {
	t.Helper()
	now := time.Now()
	root, rootKey, err := ca.NewRoot(ca.RootOptions{TrustDomain: testTD, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	key, err := ca.GenerateKey(ca.DefaultKeyType)
	if err != nil {
		t.Fatal(err)
	}
	id := ca.ServiceID{TrustDomain: testTD, Namespace: "default", Datacenter: "dc1", Service: "web"}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{id.URI()}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.SignLeaf(csr, id, ca.Signer{Cert: root, Key: rootKey}, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := ca.EncodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &pbproxy.Snapshot{
		Version: version,
		Identity: &pbproxy.Identity{Namespace: "default", Service: "web", Datacenter: "dc1", TrustDomain: testTD,
			SpiffeId: id.String(), Task: testTask, Instance: "i1"},
		Certificates: &pbproxy.Certificates{LeafPem: ca.EncodeCerts(leaf), KeyPem: keyPEM, RootsPem: [][]byte{ca.EncodeCerts(root)}},
		AdminAddress: "127.0.0.1:0",
	}
}

// agentSocket serves ProxyService on a Unix socket as the agent does:
// the snapshots sent on its channel, to its task only.
type agentSocket struct {
	pbproxy.UnimplementedProxyServiceServer
	snaps chan *pbproxy.Snapshot
	srv   *grpc.Server
	mu    sync.Mutex
	tasks []string
}

func serveSocket(t *testing.T, path string) *agentSocket {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	a := &agentSocket{snaps: make(chan *pbproxy.Snapshot), srv: grpc.NewServer()}
	pbproxy.RegisterProxyServiceServer(a.srv, a)
	go a.srv.Serve(l)
	t.Cleanup(a.srv.Stop)
	return a
}

func (a *agentSocket) Watch(req *pbproxy.WatchRequest, stream pbproxy.ProxyService_WatchServer) error {
	a.mu.Lock()
	a.tasks = append(a.tasks, req.GetTask())
	a.mu.Unlock()
	if req.GetTask() != testTask {
		return status.Errorf(codes.PermissionDenied, "task %q is not this socket's", req.GetTask())
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case s := <-a.snaps:
			if err := stream.Send(s); err != nil {
				return err
			}
		}
	}
}

// waitFor polls cond until it holds, failing the test after 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	w := backoff.Waiter{Policy: backoff.Poll}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !cond() {
		if !w.Wait(ctx) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func version(p *proxy.Proxy) string { return p.Snapshot().GetVersion() }

// TestRunFollowsTheAgent: each snapshot is applied; a refused one leaves
// the previous; with the agent gone the proxy keeps its last snapshot and
// serves, and takes the next one once the agent is back; the end of ctx
// stops it cleanly.
func TestRunFollowsTheAgent(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	agent := serveSocket(t, sock)
	p, err := proxy.New(proxy.Config{Log: testlog.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, Config{Socket: sock, Task: testTask, DrainTimeout: 5 * time.Second, Log: testlog.Logger(t)}, p)
	}()

	agent.snaps <- snapshotOf(t, "v1")
	waitFor(t, "v1", func() bool { return version(p) == "v1" })
	waitFor(t, "the admin port", func() bool { return p.Addr("admin") != nil })

	bad := snapshotOf(t, "v-bad")
	bad.Certificates.RootsPem = nil
	agent.snaps <- bad
	agent.snaps <- snapshotOf(t, "v2") // sent once the bad one was read
	waitFor(t, "v2", func() bool { return version(p) == "v2" })

	// The agent goes away: the proxy keeps serving v2.
	agent.srv.Stop()
	admin := p.Addr("admin").String()
	c, err := net.Dial("tcp", admin)
	if err != nil {
		t.Fatalf("the admin port with the agent away: %v", err)
	}
	c.Close()
	if version(p) != "v2" {
		t.Fatalf("version %q with the agent away, want v2", version(p))
	}

	// The agent is back on the same socket: the proxy redials.
	agent2 := serveSocket(t, sock)
	agent2.snaps <- snapshotOf(t, "v3")
	waitFor(t, "v3", func() bool { return version(p) == "v3" })
	agent2.mu.Lock()
	tasks := agent2.tasks
	agent2.mu.Unlock()
	if len(tasks) == 0 || tasks[0] != testTask {
		t.Errorf("watched tasks %q, want %q", tasks, testTask)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after its context ended: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
	if !p.Draining() {
		t.Error("the proxy did not drain")
	}
	if p.Addr("admin") != nil {
		t.Error("the admin port is still up after run returned")
	}
}

// TestRunRedialsARefusal: a socket that refuses the task is asked again,
// with backoff, and never takes the proxy down.
func TestRunRedialsARefusal(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	agent := serveSocket(t, sock)
	p, err := proxy.New(proxy.Config{Log: testlog.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, Config{Socket: sock, Task: "other-1", DrainTimeout: time.Second, Log: testlog.Logger(t)}, p)
	}()
	waitFor(t, "a second Watch", func() bool {
		agent.mu.Lock()
		defer agent.mu.Unlock()
		return len(agent.tasks) >= 2
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if p.Snapshot() != nil {
		t.Error("a refused watch gave a snapshot")
	}
}

func TestConfigRefusals(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Task: testTask}, "-socket: required"},
		{Config{Socket: "/x/proxy.sock"}, "-task: required"},
		{Config{Socket: "/x/proxy.sock", Task: testTask, DrainTimeout: -time.Second}, "-drain-timeout: -1s is negative"},
	} {
		err := Run(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// TestDrain: the drain ends when the connections have, or at its bound
// with the number left.
func TestDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		open := 2
		active := func() int { mu.Lock(); defer mu.Unlock(); return open }
		go func() {
			time.Sleep(3 * time.Second)
			mu.Lock()
			open = 0
			mu.Unlock()
		}()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if left := drain(ctx, active); left != 0 {
			t.Fatalf("drain left %d", left)
		}
		if took := time.Since(start); took < 3*time.Second || took > 3*time.Second+drainPoll.Max {
			t.Errorf("drained after %s, want just after 3s", took)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		if left := drain(ctx, func() int { return 1 }); left != 1 {
			t.Fatalf("drain left %d, want 1", left)
		}
		if took := time.Since(start); took != 5*time.Second {
			t.Errorf("drain gave up after %s, want its bound, 5s", took)
		}
	})
}

// TestActiveConnections reads the proxy's own gauge, over its listeners.
func TestActiveConnections(t *testing.T) {
	p, err := proxy.New(proxy.Config{Log: testlog.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if n := activeConnections(p); n != 0 {
		t.Fatalf("a new proxy has %d connections", n)
	}
	p.Stats().Active.WithLabelValues("inbound").Add(2)
	p.Stats().Active.WithLabelValues("outbound").Inc()
	if n := activeConnections(p); n != 3 {
		t.Fatalf("%d connections, want 3", n)
	}
}

// TestRunDrainsOnStop: once ctx ends the inbound listener refuses new
// connections, and run waits for the one open to end before it returns.
func TestRunDrainsOnStop(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	agent := serveSocket(t, sock)
	p, err := proxy.New(proxy.Config{Log: testlog.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, Config{Socket: sock, Task: testTask, DrainTimeout: time.Minute, Log: testlog.Logger(t)}, p)
	}()
	snap := snapshotOf(t, "v1")
	snap.Inbound = &pbproxy.Inbound{Address: "127.0.0.1:0", AppAddress: "127.0.0.1:1", Protocol: "tcp", DefaultIntention: "deny"}
	agent.snaps <- snap
	waitFor(t, "the inbound listener", func() bool { return p.Addr("inbound") != nil })
	inbound := p.Addr("inbound").String()

	// A client that has connected and not yet finished its handshake.
	c, err := net.Dial("tcp", inbound)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "the connection to count", func() bool { return activeConnections(p) == 1 })

	cancel()
	waitFor(t, "the inbound listener to close", func() bool { return p.Addr("inbound") == nil })
	if c2, err := net.Dial("tcp", inbound); err == nil {
		c2.Close()
		t.Error("a new inbound connection was accepted while draining")
	}
	select {
	case err := <-done:
		t.Fatalf("run returned (%v) with a connection open", err)
	default:
	}
	c.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return once the last connection ended")
	}
}

// TestRunDrainsOnTheDrainSignal: the agent's drain signal closes the
// inbound listener while the proxy goes on serving (its admin port, the
// outbound side), until ctx ends.
func TestRunDrainsOnTheDrainSignal(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	agent := serveSocket(t, sock)
	p, err := proxy.New(proxy.Config{Log: testlog.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	drainCh := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, Config{Socket: sock, Task: testTask, DrainTimeout: time.Minute, Drain: drainCh, Log: testlog.Logger(t)}, p)
	}()
	snap := snapshotOf(t, "v1")
	snap.Inbound = &pbproxy.Inbound{Address: "127.0.0.1:0", AppAddress: "127.0.0.1:1", Protocol: "tcp", DefaultIntention: "deny"}
	agent.snaps <- snap
	waitFor(t, "the inbound listener", func() bool { return p.Addr("inbound") != nil })

	close(drainCh)
	waitFor(t, "the inbound listener to close", func() bool { return p.Addr("inbound") == nil })
	if !p.Draining() || p.Addr("admin") == nil {
		t.Fatalf("draining %v, admin %v: want a draining proxy still serving", p.Draining(), p.Addr("admin"))
	}
	select {
	case err := <-done:
		t.Fatalf("run returned (%v) on the drain signal", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
