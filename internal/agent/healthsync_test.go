package agent

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/healthsync"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/orchestrator"
)

// healthFeed gives the tests' runner (shRunner, which checks no health)
// a health for the task's container "app", as the lifecycle's checks
// would report it: set re-reports the task's last snapshot with it.
type healthFeed struct {
	mu             sync.Mutex
	health, output string
	last           *Snapshot
	report         func(Snapshot)
}

func (f *healthFeed) wrap(next NewRunnerFunc) NewRunnerFunc {
	return func(rc RunnerConfig) (TaskRunner, error) {
		inner := rc.Report
		rc.Report = func(s Snapshot) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.last, f.report = &s, inner
			inner(f.applyLocked(s))
		}
		return next(rc)
	}
}

func (f *healthFeed) applyLocked(s Snapshot) Snapshot {
	s.Containers = append([]ContainerStatus(nil), s.Containers...)
	for i, c := range s.Containers {
		if c.Name == "app" && c.Status == orchestrator.StatusRunning && f.health != "" {
			s.Containers[i].Health, s.Containers[i].HealthOutput, s.Health = f.health, f.output, f.health
		}
	}
	return s
}

// set is a new result of the app's health check. Only while the task
// runs, before it is stopped.
func (f *healthFeed) set(health, output string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.health, f.output = health, output
	if f.last != nil {
		f.report(f.applyLocked(*f.last))
	}
}

// instanceEvents records the changes of the catalog's service instances
// as the servers' watchers see them, in order.
type instanceEvents struct {
	mu     sync.Mutex
	events []*pbresource.WatchEvent
}

func watchInstances(t *testing.T, srv *testServer) *instanceEvents {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := srv.res.WatchList(ctx, &pbresource.WatchListRequest{Type: catalog.ServiceInstanceType, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	ev := &instanceEvents{}
	go func() {
		for {
			e, err := stream.Recv()
			if err != nil {
				return
			}
			ev.mu.Lock()
			ev.events = append(ev.events, e)
			ev.mu.Unlock()
		}
	}()
	return ev
}

// beforeDelete is the instance called name as it was last written before
// it was deleted; nil when it has not been deleted.
func (ev *instanceEvents) beforeDelete(name string) (*pbresource.Resource, bool) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	var last *pbresource.Resource
	for _, e := range ev.events {
		if e.GetResource().GetId().GetName() != name {
			continue
		}
		switch e.GetOp() {
		case pbresource.WatchEvent_OP_UPSERT:
			last = e.GetResource()
		case pbresource.WatchEvent_OP_DELETE:
			return last, true
		}
	}
	return nil, false
}

// creates counts the creations of the instance called name.
func (ev *instanceEvents) creates(name string) int {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	n, exists := 0, false
	for _, e := range ev.events {
		if e.GetResource().GetId().GetName() != name {
			continue
		}
		switch e.GetOp() {
		case pbresource.WatchEvent_OP_UPSERT:
			if !exists {
				n++
			}
			exists = true
		case pbresource.WatchEvent_OP_DELETE:
			exists = false
		}
	}
	return n
}

// A mesh task's container health becomes its catalog check through a
// real agent (its own components, mesh-init and health-sync) and server: health-sync hears it through the task manager
// and writes it over the agent's link, as the agent, after an agent
// restart too. When the task stops, its check is critical before the
// instance is removed.
func TestHealthSyncKeepsTheCatalogCheck(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	feed := &healthFeed{}
	cfg := config(t, "i-1", pt, srv)
	cfg.NewRunner = feed.wrap(pt.newRunner)
	// The agent's own components: mesh-init registers the instance,
	// health-sync (after it) keeps its checks.
	cfg.Components = nil
	events := watchInstances(t, srv)
	a := startAgent(t, cfg)
	registered(t, srv, a)
	def := shDefinition("web", pidScript)
	def.Containers[0].HealthCheck = &pborch.HealthCheck{Command: []string{"/bin/true"}} // the feed stands in for it
	def.Mesh = &pborch.TaskMesh{Port: 8080}
	srv.registerDefinition(t, "default", def)
	srv.place(t, "default", "t1", "web:1", "i-1")
	srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))

	check := func() *pbcatalog.CheckStatus {
		resp, err := srv.res.Read(context.Background(), &pbresource.ReadRequest{Id: catalog.ServiceInstanceID("default", "t1")})
		if err != nil {
			t.Fatalf("the service instance: %v", err)
		}
		return catalog.HealthOf(resp.GetResource()).GetChecks()[0]
	}
	feed.set(orchestrator.HealthHealthy, "GET /health: 200 OK")
	eventually(t, "the check passes", func() bool {
		c := check()
		return c.GetStatus() == catalog.CheckPassing && c.GetOutput() == "GET /health: 200 OK"
	})

	// The agent is killed and restarts: the task runs on, its Prestarts
	// are not called again, and the new agent's health-sync follows it.
	a.kill(t)
	a = startAgent(t, cfg)
	srv.waitTask(t, "default", "t1", "is reported by the new agent", func(tk *storedTask) bool {
		return tk.GetSession() == a.Session() && tk.GetLastStatus() == orchestrator.StatusRunning
	})
	feed.set(orchestrator.HealthUnhealthy, "GET /health: 503 Service Unavailable")
	eventually(t, "the check turns critical", func() bool {
		c := check()
		return c.GetStatus() == catalog.CheckCritical && c.GetOutput() == "GET /health: 503 Service Unavailable"
	})
	feed.set(orchestrator.HealthHealthy, "GET /health: 200 OK")
	eventually(t, "the check passes again", func() bool { return check().GetStatus() == catalog.CheckPassing })

	srv.editTask(t, "default", "t1", func(tk *pborch.Task) { tk.DesiredStatus = orchestrator.StatusStopped })
	srv.waitTask(t, "default", "t1", "stops", lastStatus(orchestrator.StatusStopped))
	var last *pbresource.Resource
	eventually(t, "the instance is removed", func() bool {
		var deleted bool
		last, deleted = events.beforeDelete("t1")
		return deleted
	})
	if n := events.creates("t1"); n != 1 {
		t.Errorf("the instance was registered %d times", n)
	}
	at := catalog.HealthOf(last)
	if at.GetHealth() != catalog.CheckCritical || !strings.HasPrefix(at.GetChecks()[0].GetOutput(), healthsync.StoppingOutput) {
		t.Fatalf("the instance's health when it was removed: %v, want every check critical, the task stopping", at)
	}
	if _, err := srv.res.Read(context.Background(), &pbresource.ReadRequest{Id: catalog.ServiceInstanceID("default", "t1")}); status.Code(err) != codes.NotFound {
		t.Fatalf("the instance after the task stopped: %v", err)
	}
}

// An agent that goes down cannot say its tasks are gone: the servers set
// its instances' checks critical, and lift that once it is back.
func TestDownAgentsChecksGoCritical(t *testing.T) {
	srv := startServerTTL(t, 2*time.Second)
	pt := newProcTable(t)
	feed := &healthFeed{}
	cfg := config(t, "i-1", pt, srv)
	cfg.NewRunner = feed.wrap(pt.newRunner)
	cfg.Components = nil // mesh-init and health-sync
	a := startAgent(t, cfg)
	registered(t, srv, a)
	def := shDefinition("web", pidScript)
	def.Containers[0].HealthCheck = &pborch.HealthCheck{Command: []string{"/bin/true"}}
	def.Mesh = &pborch.TaskMesh{Port: 8080}
	srv.registerDefinition(t, "default", def)
	srv.place(t, "default", "t1", "web:1", "i-1")
	srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))
	check := func() *pbcatalog.CheckStatus {
		resp, err := srv.res.Read(context.Background(), &pbresource.ReadRequest{Id: catalog.ServiceInstanceID("default", "t1")})
		if err != nil {
			t.Fatalf("the service instance: %v", err)
		}
		return catalog.HealthOf(resp.GetResource()).GetChecks()[0]
	}
	feed.set(orchestrator.HealthHealthy, "GET /health: 200 OK")
	eventually(t, "the check passes", func() bool { return check().GetStatus() == catalog.CheckPassing })

	a.kill(t) // its heartbeats stop; the task runs on
	eventually(t, "the servers set the check critical", func() bool {
		c := check()
		return c.GetStatus() == catalog.CheckCritical && c.GetOutput() == catalog.AgentDownOutput+"i-1"
	})
	if _, in := srv.instance(t, "i-1"); in.GetStatus() != orchestrator.InstanceDown {
		t.Fatalf("instance i-1 is %s, want down", in.GetStatus())
	}

	startAgent(t, cfg)
	eventually(t, "the agent's report shows again", func() bool {
		c := check()
		return c.GetStatus() == catalog.CheckPassing && c.GetOutput() == "GET /health: 200 OK"
	})
}
