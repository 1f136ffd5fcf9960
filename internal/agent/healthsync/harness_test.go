package healthsync_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/agent/healthsync"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

// world is the real resource service, in memory, with the catalog's
// types: the servers as health-sync sees them.
type world struct {
	t   *testing.T
	ctx context.Context
	api *resource.Service
}

func newWorld(t *testing.T) *world {
	t.Helper()
	reg := resource.NewRegistry()
	core.Register(reg)
	orchestrator.Register(reg)
	catalog.Register(reg)
	api := resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg})
	ctx := context.Background()
	if err := core.Bootstrap(ctx, api); err != nil {
		t.Fatal(err)
	}
	return &world{t: t, ctx: ctx, api: api}
}

// meshTask writes a task called name on instance and its ServiceInstance
// (as mesh-init registers it: named after the task, owned by it) with
// checks; it returns the task as its hooks see it and the instance's id.
func (w *world) meshTask(name, instance string, checks ...string) (component.Task, *pbresource.ID) {
	w.t.Helper()
	data, _ := anypb.New(&pborch.Task{TaskDefinition: "web:1", Instance: instance, StartedBy: "test"})
	task, err := w.api.Write(w.ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: orchestrator.TaskID("default", name), Data: data}})
	if err != nil {
		w.t.Fatal(err)
	}
	si := &pbcatalog.ServiceInstance{Service: "web", Address: "10.0.0.5", Port: 8080, Instance: instance, Task: name}
	for _, c := range checks {
		si.Checks = append(si.Checks, &pbcatalog.CheckDefinition{Name: c})
	}
	sdata, _ := anypb.New(si)
	out, err := w.api.Write(w.ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: catalog.ServiceInstanceID("default", name), Owner: task.GetResource().GetId(), Data: sdata}})
	if err != nil {
		w.t.Fatal(err)
	}
	def := &pborch.TaskDefinition{Family: "web", Revision: 1, Mesh: &pborch.TaskMesh{Port: 8080}}
	return component.Task{ID: task.GetResource().GetId(), Definition: def}, out.GetResource().GetId()
}

// health is the instance's health as every reader sees it.
func (w *world) health(id *pbresource.ID) *pbcatalog.ChecksStatus {
	w.t.Helper()
	resp, err := w.api.Read(w.ctx, &pbresource.ReadRequest{Id: id})
	if err != nil {
		w.t.Fatal(err)
	}
	return catalog.HealthOf(resp.GetResource())
}

// checks are the merged checks' statuses and outputs, by name.
func (w *world) checks(id *pbresource.ID) map[string][2]string {
	out := map[string][2]string{}
	for _, c := range w.health(id).GetChecks() {
		out[c.GetName()] = [2]string{c.GetStatus(), c.GetOutput()}
	}
	return out
}

// agentCatalog is the servers as the agent of instance reaches them: the
// real service, called as that agent (resource.AsAgent, which the
// server's edge sets for a proven agent). It counts the batched writes.
type agentCatalog struct {
	api      *resource.Service
	instance string

	mu     sync.Mutex
	writes int
	errs   []error
}

func (c *agentCatalog) InstancesOf(ctx context.Context, task *pbresource.ID) ([]*pbresource.Resource, error) {
	resp, err := c.api.ListByOwner(resource.AsAgent(ctx, c.instance), &pbresource.ListByOwnerRequest{Owner: task})
	if err != nil {
		return nil, err
	}
	return healthsync.OwnedInstances(resp.GetResources()), nil
}

func (c *agentCatalog) WriteStatuses(ctx context.Context, req *pbresource.WriteStatusesRequest) (*pbresource.WriteStatusesResponse, error) {
	resp, err := c.api.WriteStatuses(resource.AsAgent(ctx, c.instance), req)
	c.mu.Lock()
	c.writes++
	if err != nil {
		c.errs = append(c.errs, err)
	}
	c.mu.Unlock()
	return resp, err
}

func (c *agentCatalog) count() (int, []error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes, append([]error(nil), c.errs...)
}

// bubbleClock is the time of a synctest bubble.
type bubbleClock struct{}

func (bubbleClock) Now() time.Time                         { return time.Now() }
func (bubbleClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// start makes health-sync over cat and runs its Start until the test
// ends.
func start(t *testing.T, cat healthsync.Catalog) *healthsync.HealthSync {
	t.Helper()
	c, err := healthsync.New(healthsync.Config{Catalog: cat})(component.Deps{Instance: "i-1", Clock: bubbleClock{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return c.(*healthsync.HealthSync)
}

func running(containers ...component.ContainerHealth) component.TaskHealth {
	h := component.TaskHealth{Status: orchestrator.StatusRunning, Health: orchestrator.TaskHealthy, Containers: containers}
	for _, c := range containers {
		if c.Health != orchestrator.TaskHealthy {
			h.Health = c.Health
		}
	}
	return h
}

func container(name, health, output string) component.ContainerHealth {
	return component.ContainerHealth{Name: name, HasCheck: true, Health: health, Output: output}
}
