package catalogmodule_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/catalog/catalogmodule"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

// An instance of a task whose agent is marked down has every check set
// critical by the servers, which its agent cannot do; the verdict goes
// once the agent registers again, and its report shows again. Nobody but
// the servers' controller writes that verdict, and no other instance's
// agent writes the instance's own report.
func TestHealthControllerSetsADownAgentsChecksCritical(t *testing.T) {
	reg := resource.NewRegistry()
	core.Register(reg)
	orchestrator.Register(reg)
	catalog.Register(reg)
	api := resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg})
	ctx := context.Background()
	if err := core.Bootstrap(ctx, api); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	hc := catalogmodule.HealthController(api, func() time.Time { return now }, nil)[0]

	register := func(session string) {
		t.Helper()
		data, _ := anypb.New(&pborch.Instance{Status: orchestrator.InstanceReady})
		regn, _ := anypb.New(&pborch.AgentRegistration{Session: session, RegisteredAt: timestamppb.New(now)})
		res := &pbresource.Resource{Id: orchestrator.InstanceID("i-1"), Data: data}
		if cur, err := api.Read(ctx, &pbresource.ReadRequest{Id: res.Id}); err == nil {
			res.Version = cur.GetResource().GetVersion()
		}
		if _, err := api.WriteBatch(resource.AsAgent(ctx, "i-1"), &pbresource.WriteBatchRequest{
			Resources: []*pbresource.Resource{res},
			Statuses:  []*pbresource.WriteStatusRequest{{Id: res.Id, Key: orchestrator.AgentStatusKey, Status: &pbresource.Status{Data: regn}}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	register("s1")
	taskData, _ := anypb.New(&pborch.Task{TaskDefinition: "web:1", Instance: "i-1", StartedBy: "test"})
	task, err := api.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: orchestrator.TaskID("default", "web-1"), Data: taskData}})
	if err != nil {
		t.Fatal(err)
	}
	siData, _ := anypb.New(&pbcatalog.ServiceInstance{Service: "web", Address: "10.0.0.5", Port: 8080, Instance: "i-1", Task: "web-1",
		Checks: []*pbcatalog.CheckDefinition{{Name: "web-1/app"}, {Name: "web-1/db"}}})
	si, err := api.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: catalog.ServiceInstanceID("default", "web-1"), Owner: task.GetResource().GetId(), Data: siData}})
	if err != nil {
		t.Fatal(err)
	}
	id := si.GetResource().GetId()
	writeChecks := func(ctx context.Context, key string, at time.Time) error {
		cs := &pbcatalog.ChecksStatus{Checks: []*pbcatalog.CheckStatus{
			{Name: "web-1/app", Status: catalog.CheckPassing, Output: "200 OK"},
			{Name: "web-1/db", Status: catalog.CheckPassing},
		}, Health: catalog.CheckPassing, ReportedAt: timestamppb.New(at)}
		payload, _ := anypb.New(cs)
		_, err := api.WriteStatus(ctx, &pbresource.WriteStatusRequest{Id: id, Key: key, Status: &pbresource.Status{Data: payload}})
		return err
	}
	read := func() *pbresource.Resource {
		t.Helper()
		resp, err := api.Read(ctx, &pbresource.ReadRequest{Id: id})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetResource()
	}
	reconcile := func() {
		t.Helper()
		if err := hc.Reconciler.Reconcile(ctx, controller.Request{ID: id}); err != nil {
			t.Fatal(err)
		}
	}

	if err := writeChecks(resource.AsAgent(ctx, "i-1"), catalog.AgentChecksStatusKey, t0); err != nil {
		t.Fatal(err)
	}
	// Nobody else speaks for the instance: not another instance's agent,
	// not a plain caller, not the agent for the servers.
	for _, forge := range []struct {
		ctx context.Context
		key string
	}{
		{resource.AsAgent(ctx, "i-2"), catalog.AgentChecksStatusKey},
		{ctx, catalog.AgentChecksStatusKey},
		{resource.AsAgent(ctx, "i-1"), catalog.ServerChecksStatusKey},
	} {
		if err := writeChecks(forge.ctx, forge.key, t0.Add(time.Hour)); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("a forged report under %s: %v, want PermissionDenied", forge.key, err)
		}
	}
	// Its agent is up: nothing to say.
	reconcile()
	if h := catalog.HealthOf(read()); h.GetHealth() != catalog.CheckPassing {
		t.Fatalf("agent up: %v", h)
	}
	if catalog.ServerChecksOf(read()) != nil {
		t.Fatal("a verdict on an instance whose agent is up")
	}

	// The servers mark its agent down: every check critical, over the
	// agent's report.
	now = t0.Add(time.Minute)
	downData, _ := anypb.New(&pborch.InstanceDown{Session: "s1", DownSince: timestamppb.New(now)})
	if _, err := api.WriteStatus(resource.AsController(ctx, orchestrator.DownStatusKey), &pbresource.WriteStatusRequest{
		Id: orchestrator.InstanceID("i-1"), Key: orchestrator.DownStatusKey, Status: &pbresource.Status{Data: downData},
	}); err != nil {
		t.Fatal(err)
	}
	reconcile()
	h := catalog.HealthOf(read())
	if h.GetHealth() != catalog.CheckCritical || len(h.GetChecks()) != 2 {
		t.Fatalf("agent down: %v", h)
	}
	for _, c := range h.GetChecks() {
		if c.GetStatus() != catalog.CheckCritical || !strings.HasPrefix(c.GetOutput(), catalog.AgentDownOutput) || !strings.HasSuffix(c.GetOutput(), "i-1") {
			t.Fatalf("agent down: check %v", c)
		}
	}
	// Idempotent.
	version := read().GetVersion()
	now = now.Add(time.Minute)
	reconcile()
	if read().GetVersion() != version {
		t.Fatal("a second reconcile of a down agent's instance wrote again")
	}

	// The agent registers again (a new session): its report shows again.
	register("s2")
	reconcile()
	if h := catalog.HealthOf(read()); h.GetHealth() != catalog.CheckPassing || h.GetChecks()[0].GetOutput() != "200 OK" {
		t.Fatalf("agent back: %v", h)
	}
	version = read().GetVersion()
	reconcile()
	if read().GetVersion() != version {
		t.Fatal("a second reconcile after the agent came back wrote again")
	}

	// Its Instance gone: no agent can report, so critical.
	if _, err := api.Delete(ctx, &pbresource.DeleteRequest{Id: orchestrator.InstanceID("i-1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Read(ctx, &pbresource.ReadRequest{Id: id}); status.Code(err) == codes.NotFound {
		return // deleting the Instance took its tasks, and their instances, with it
	}
	reconcile()
	if h := catalog.HealthOf(read()); h.GetHealth() != catalog.CheckCritical {
		t.Fatalf("Instance gone: %v", h)
	}
}
