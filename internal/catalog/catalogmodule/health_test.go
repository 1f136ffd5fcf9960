package catalogmodule_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/catalog/catalogmodule"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

// The health controller expires the TTL checks of an instance from
// outside Trellis at their deadline, by its own clock, and nobody but the
// servers writes those checks.
func TestHealthControllerExpiresTTLChecks(t *testing.T) {
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
	ctls := catalogmodule.HealthController(api, func() time.Time { return now }, nil)
	if len(ctls) != 1 || ctls[0].Name != catalog.HealthControllerName {
		t.Fatalf("controllers %v: want the owner of %s", ctls, catalog.ServerChecksStatusKey)
	}
	hc := ctls[0]

	data, _ := anypb.New(&pbcatalog.ServiceInstance{Service: "db", Address: "10.0.0.9", Port: 5432,
		Checks: []*pbcatalog.CheckDefinition{{Name: "service:db", Ttl: durationpb.New(10 * time.Second)}}})
	out, err := api.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: catalog.ServiceInstanceID("default", "db-1"), Data: data}})
	if err != nil {
		t.Fatal(err)
	}
	id := out.GetResource().GetId()
	refresh := func(ctx context.Context) error {
		cs := &pbcatalog.ChecksStatus{Checks: []*pbcatalog.CheckStatus{{Name: "service:db", Status: catalog.CheckPassing, ChangedAt: timestamppb.New(t0), CheckedAt: timestamppb.New(now)}}, Health: catalog.CheckPassing, ReportedAt: timestamppb.New(now)}
		payload, _ := anypb.New(cs)
		_, err := api.WriteStatus(ctx, &pbresource.WriteStatusRequest{Id: id, Key: catalog.ServerChecksStatusKey, Status: &pbresource.Status{Data: payload}})
		return err
	}
	health := func() string {
		resp, err := api.Read(ctx, &pbresource.ReadRequest{Id: id})
		if err != nil {
			t.Fatal(err)
		}
		return catalog.HealthOf(resp.GetResource()).GetHealth()
	}
	reconcile := func() error { return hc.Reconciler.Reconcile(ctx, controller.Request{ID: id}) }

	// Nobody refreshed it: critical, and nothing to expire.
	if h := health(); h != catalog.CheckCritical {
		t.Fatalf("before any refresh: %s", h)
	}
	if err := reconcile(); err != nil {
		t.Fatalf("nothing to expire: %v", err)
	}
	// Neither a plain caller nor any agent refreshes it; an agent may not
	// write its agent key either, since it runs on no instance.
	for _, forger := range []context.Context{ctx, resource.AsAgent(ctx, "i-1"), resource.AsController(ctx, "orchestrator-task")} {
		if err := refresh(forger); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("a forged refresh: %v", err)
		}
	}
	payload, _ := anypb.New(&pbcatalog.ChecksStatus{Health: catalog.CheckPassing, ReportedAt: timestamppb.Now()})
	_, err = api.WriteStatus(resource.AsAgent(ctx, "i-1"), &pbresource.WriteStatusRequest{Id: id, Key: catalog.AgentChecksStatusKey, Status: &pbresource.Status{Data: payload}})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "on none") {
		t.Fatalf("an agent writing the agent key of an instance from outside: %v", err)
	}

	// The servers refresh it (as the catalog's operation will): passing
	// until its ttl runs out.
	if err := refresh(resource.AsController(ctx, catalog.HealthControllerName)); err != nil {
		t.Fatal(err)
	}
	if h := health(); h != catalog.CheckPassing {
		t.Fatalf("after a refresh: %s", h)
	}
	now = t0.Add(4 * time.Second)
	var requeue *controller.RequeueAfterError
	if err := reconcile(); !errors.As(err, &requeue) || requeue.After != 6*time.Second {
		t.Fatalf("before the deadline: %v, want a requeue after 6s", err)
	}
	if h := health(); h != catalog.CheckPassing {
		t.Fatalf("before the deadline: %s", h)
	}
	now = t0.Add(10 * time.Second)
	if err := reconcile(); err != nil {
		t.Fatalf("at the deadline: %v", err)
	}
	resp, err := api.Read(ctx, &pbresource.ReadRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	h := catalog.HealthOf(resp.GetResource())
	if h.GetHealth() != catalog.CheckCritical || !strings.HasPrefix(h.GetChecks()[0].GetOutput(), catalog.ExpiredOutput) {
		t.Fatalf("at the deadline: %v", h)
	}
	// Idempotent: once critical, nothing more to write or wait for.
	version := resp.GetResource().GetVersion()
	if err := reconcile(); err != nil {
		t.Fatal(err)
	}
	if resp, _ := api.Read(ctx, &pbresource.ReadRequest{Id: id}); resp.GetResource().GetVersion() != version {
		t.Fatal("a second reconcile wrote again")
	}
}
