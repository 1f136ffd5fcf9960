package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbproxy "trellis.dev/trellis/api/proxy/v1"
	"trellis.dev/trellis/internal/agent/proxycomp"
	"trellis.dev/trellis/internal/agent/tasks"
	"trellis.dev/trellis/internal/orchestrator"
)

// proxyStream is a proxy's Watch stream on a task's socket.
type proxyStream struct {
	t      *testing.T
	stream grpc.ServerStreamingClient[pbproxy.Snapshot]
	last   *pbproxy.Snapshot
}

// watchProxy connects to the socket of the task with uid, as its proxy
// would, and watches the snapshots of task.
func watchProxy(t *testing.T, dataDir, uid, task string) *proxyStream {
	t.Helper()
	path := proxycomp.SocketPath(tasks.TaskDir(dataDir, uid))
	eventually(t, "the task's proxy socket exists", func() bool { _, err := os.Stat(path); return err == nil })
	cc, err := grpc.NewClient("passthrough:///proxy", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return proxycomp.DialUnix(ctx, path) }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(func() { cancel(); cc.Close() })
	stream, err := pbproxy.NewProxyServiceClient(cc).Watch(ctx, &pbproxy.WatchRequest{Task: task}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	return &proxyStream{t: t, stream: stream}
}

// until receives snapshots until one satisfies cond, and returns it.
func (p *proxyStream) until(what string, cond func(*pbproxy.Snapshot) bool) *pbproxy.Snapshot {
	p.t.Helper()
	if p.last != nil && cond(p.last) {
		return p.last
	}
	for {
		s, err := p.stream.Recv()
		if err != nil {
			p.t.Fatalf("waiting until %s (last snapshot %v): %v", what, p.last, err)
		}
		if p.last != nil && s.GetVersion() == p.last.GetVersion() {
			p.t.Errorf("the same version %s sent twice", s.GetVersion())
		}
		p.last = s
		if cond(s) {
			return s
		}
	}
}

func endpointsOf(s *pbproxy.Snapshot) []string {
	var out []string
	for _, u := range s.GetUpstreams() {
		for _, e := range u.GetEndpoints() {
			out = append(out, e.GetInstance())
		}
	}
	return out
}

func httpDo(t *testing.T, method, url string, body any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, url, bytes.NewReader(b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s = %s", method, url, resp.Status)
	}
}

// The proxy component serves a mesh task's proxy its snapshots on the
// task's socket: a new one when an upstream instance goes critical, when
// an intention of the task's service is created, when the CA's root
// rotates; only to its own task; and again after the agent restarts.
func TestProxyComponentServesSnapshots(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	feed := &healthFeed{}
	cfg := config(t, "i-1", pt, srv)
	cfg.ResignWindow = 50 * time.Millisecond // a rotation's re-signing, soon
	// The feed reports the health of counting's task alone.
	fed := feed.wrap(pt.newRunner)
	cfg.NewRunner = func(rc RunnerConfig) (TaskRunner, error) {
		if rc.Name == "count-1" {
			return fed(rc)
		}
		return pt.newRunner(rc)
	}
	a := startAgent(t, cfg)
	registered(t, srv, a)
	base := "http://" + srv.srv.HTTPAddr()

	// counting's container "app" has a check (the feed stands in for it);
	// the dashboard calls counting on 127.0.0.1:5000.
	counting := shDefinition("counting", pidScript)
	counting.Containers[0].HealthCheck = &pborch.HealthCheck{Command: []string{"/bin/true"}}
	counting.Mesh = &pborch.TaskMesh{Port: 9003}
	dashboard := shDefinition("dashboard", pidScript)
	dashboard.Containers[0].Name = "main"
	dashboard.Mesh = &pborch.TaskMesh{Service: "dash", Port: 9002, Protocol: "http",
		Upstreams: []*pborch.MeshUpstream{{Service: "counting", LocalPort: 5000}}}
	srv.registerDefinition(t, "default", counting)
	srv.registerDefinition(t, "default", dashboard)
	srv.place(t, "default", "count-1", "counting:1", "i-1")
	dash := srv.place(t, "default", "dash-1", "dashboard:1", "i-1")
	srv.waitTask(t, "default", "count-1", "runs", lastStatus(orchestrator.StatusRunning))
	srv.waitTask(t, "default", "dash-1", "runs", lastStatus(orchestrator.StatusRunning))
	feed.set(orchestrator.HealthHealthy, "ok")

	uid := dash.GetId().GetUid()
	fi, err := os.Stat(proxycomp.SocketPath(tasks.TaskDir(cfg.DataDir, uid)))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o660 || st.Uid != proxycomp.ProxyUID || st.Gid != proxycomp.ProxyGID {
		t.Errorf("the socket is %v, owned by %d:%d; want 0660, 1337:1337", fi.Mode(), st.Uid, st.Gid)
	}

	p := watchProxy(t, cfg.DataDir, uid, "dash-1")
	first := p.until("counting's instance is an endpoint", func(s *pbproxy.Snapshot) bool {
		return strings.Join(endpointsOf(s), ",") == "count-1"
	})
	if id := first.GetIdentity(); id.GetService() != "dash" || id.GetTask() != "dash-1" || id.GetInstance() != "i-1" ||
		!strings.HasSuffix(id.GetSpiffeId(), "/ns/default/dc/dc1/svc/dash") {
		t.Errorf("identity %v", id)
	}
	if u := first.GetUpstreams()[0]; u.GetBindAddress() != "127.0.0.1:5000" || u.GetProtocol() != "tcp" {
		t.Errorf("upstream %v", u)
	}
	if in := first.GetInbound(); in.GetAppAddress() != "127.0.0.1:9002" || in.GetProtocol() != "http" {
		t.Errorf("inbound %v", in)
	}
	if len(first.GetCertificates().GetLeafPem()) == 0 || len(first.GetCertificates().GetRootsPem()) != 1 {
		t.Errorf("certificates: leaf %d bytes, %d roots", len(first.GetCertificates().GetLeafPem()), len(first.GetCertificates().GetRootsPem()))
	}

	// The upstream's instance goes critical: it is no endpoint.
	feed.set(orchestrator.HealthUnhealthy, "down")
	p.until("counting's critical instance is dropped", func(s *pbproxy.Snapshot) bool { return len(endpointsOf(s)) == 0 })
	feed.set(orchestrator.HealthHealthy, "ok")
	p.until("counting's instance is back", func(s *pbproxy.Snapshot) bool { return len(endpointsOf(s)) == 1 })

	// An intention of the dashboard's service.
	httpDo(t, http.MethodPut, base+"/v1/intentions/dash", map[string]any{"data": map[string]any{
		"sources": []any{map[string]any{"name": "web", "action": "deny"}}}})
	p.until("the intention is in the inbound", func(s *pbproxy.Snapshot) bool {
		src := s.GetInbound().GetIntentions().GetSources()
		return len(src) == 1 && src[0].GetName() == "web" && src[0].GetAction() == "deny"
	})

	// A root rotation: both roots are trusted, and the leaf is signed
	// again (within the agent's re-sign window).
	oldLeaf := string(p.last.GetCertificates().GetLeafPem())
	httpDo(t, http.MethodPut, base+"/v1/ca/config", map[string]any{"config": map[string]any{"rotation": 1}})
	p.until("the new root is trusted and the leaf signed again", func(s *pbproxy.Snapshot) bool {
		return len(s.GetCertificates().GetRootsPem()) == 2 && string(s.GetCertificates().GetLeafPem()) != oldLeaf
	})

	// Another task's id is refused.
	other := watchProxy(t, cfg.DataDir, uid, "count-1")
	if _, err := other.stream.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Errorf("watching another task's snapshots: %v, want PermissionDenied", err)
	}

	// The agent is killed and restarts: the resumed task's socket is
	// served again, with the same content.
	before := p.last
	a.kill(t)
	if _, err := p.stream.Recv(); err == nil {
		t.Error("the stream outlived the agent")
	}
	a = startAgent(t, cfg)
	p = watchProxy(t, cfg.DataDir, uid, "dash-1")
	again := p.until("a snapshot from the restarted agent", func(*pbproxy.Snapshot) bool { return true })
	if len(again.GetCertificates().GetRootsPem()) != 2 || len(endpointsOf(again)) != 1 || len(again.GetInbound().GetIntentions().GetSources()) != 1 {
		t.Errorf("after the restart: %v (before: %v)", again, before)
	}
	_ = a
}
