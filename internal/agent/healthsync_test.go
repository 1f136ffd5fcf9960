package agent

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/component"
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

// registrar stands in for mesh-init, another component: it registers the
// task's ServiceInstance (one check, "<task>/app") in its Prestart and
// removes it in its Poststop, noting the instance's health as it was just
// before the removal.
type registrar struct {
	deps       component.Deps
	mu         sync.Mutex
	registered int
	atRemove   *pbcatalog.ChecksStatus
}

func (r *registrar) Name() string { return "registrar" }

func (r *registrar) Start(ctx context.Context) error { <-ctx.Done(); return nil }

func (r *registrar) Prestart(ctx context.Context, t component.Task) error {
	r.mu.Lock()
	r.registered++
	d := r.deps
	r.mu.Unlock()
	si := &pbcatalog.ServiceInstance{Service: "web", Address: "127.0.0.1", Port: 8080, Instance: d.Instance, Task: t.ID.GetName(),
		Checks: []*pbcatalog.CheckDefinition{{Name: t.ID.GetName() + "/app"}}}
	data, err := anypb.New(si)
	if err != nil {
		return err
	}
	return d.Servers.Call(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		_, err := pbresource.NewResourceServiceClient(cc).Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{
			Id: catalog.ServiceInstanceID(t.ID.GetTenancy().GetNamespace(), t.ID.GetName()), Owner: t.ID, Data: data}})
		return err
	})
}

func (r *registrar) Poststop(ctx context.Context, t component.Task) error {
	id := catalog.ServiceInstanceID(t.ID.GetTenancy().GetNamespace(), t.ID.GetName())
	r.mu.Lock()
	d := r.deps
	r.mu.Unlock()
	return d.Servers.Call(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		rs := pbresource.NewResourceServiceClient(cc)
		resp, err := rs.Read(ctx, &pbresource.ReadRequest{Id: id})
		if status.Code(err) == codes.NotFound {
			return nil
		}
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.atRemove = catalog.HealthOf(resp.GetResource())
		r.mu.Unlock()
		_, err = rs.Delete(ctx, &pbresource.DeleteRequest{Id: id})
		return err
	})
}

// A mesh task's container health becomes its catalog check through a
// real agent and server: health-sync hears it through the task manager
// and writes it over the agent's link, as the agent, after an agent
// restart too. When the task stops, its check is critical before the
// instance is removed.
func TestHealthSyncKeepsTheCatalogCheck(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	feed := &healthFeed{}
	cfg := config(t, "i-1", pt, srv)
	cfg.NewRunner = feed.wrap(pt.newRunner)
	reg := &registrar{}
	cfg.Components = []component.Maker{
		func(d component.Deps) (component.Component, error) {
			reg.mu.Lock()
			reg.deps = d
			reg.mu.Unlock()
			return reg, nil
		},
		healthsync.New(healthsync.Config{Interval: 20 * time.Millisecond}),
	}
	a := startAgent(t, cfg)
	registered(t, srv, a)
	def := shDefinition("web", pidScript)
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
	reg.mu.Lock()
	at, registered := reg.atRemove, reg.registered
	reg.mu.Unlock()
	if registered != 1 {
		t.Errorf("the instance was registered %d times", registered)
	}
	if at == nil || at.GetHealth() != catalog.CheckCritical || !strings.HasPrefix(at.GetChecks()[0].GetOutput(), healthsync.StoppingOutput) {
		t.Fatalf("the instance's health when it was removed: %v, want every check critical, the task stopping", at)
	}
	if _, err := srv.res.Read(context.Background(), &pbresource.ReadRequest{Id: catalog.ServiceInstanceID("default", "t1")}); status.Code(err) != codes.NotFound {
		t.Fatalf("the instance after the task stopped: %v", err)
	}
}
