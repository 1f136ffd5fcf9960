package agent

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/agent/meshinit"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// meshDefinition is a definition of one exec container running script,
// an instance of service "web" on port 8080, whose container has a health
// check.
func meshDefinition(family, script string) *pborch.TaskDefinition {
	td := shDefinition(family, script)
	td.Containers[0].HealthCheck = &pborch.HealthCheck{Command: []string{"true"}}
	td.Mesh = &pborch.TaskMesh{Service: "web", Port: 8080, Protocol: "http", Tags: []string{"v1"}, Meta: map[string]string{"team": "payments"}}
	return td
}

// serviceInstance reads a service instance of namespace default: nil
// when there is none.
func (ts *testServer) serviceInstance(t testing.TB, name string) (*pbresource.Resource, *pbcatalog.ServiceInstance) {
	t.Helper()
	resp, err := ts.res.Read(context.Background(), &pbresource.ReadRequest{Id: catalog.ServiceInstanceID("default", name)})
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	if err != nil {
		t.Fatalf("read service instance %s: %v", name, err)
	}
	si, err := resource.DecodeData[*pbcatalog.ServiceInstance](resp.GetResource())
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetResource(), si
}

// list lists the resources of typ in namespace default.
func (ts *testServer) list(t testing.TB, typ *pbresource.Type) []*pbresource.Resource {
	t.Helper()
	resp, err := ts.res.List(context.Background(), &pbresource.ListRequest{Type: typ, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
	if err != nil {
		t.Fatalf("list %s: %v", typ.GetKind(), err)
	}
	return resp.GetResources()
}

// atRun records, when a task's runner starts its containers, the task's
// service instance as the servers then have it.
type atRun struct {
	srv  *testServer
	t    testing.TB
	mu   sync.Mutex
	seen map[string]*pbcatalog.ServiceInstance // by task; nil: none registered
}

func (r *atRun) wrap(next NewRunnerFunc) NewRunnerFunc {
	return func(rc RunnerConfig) (TaskRunner, error) {
		_, si := r.srv.serviceInstance(r.t, rc.Name)
		r.mu.Lock()
		if r.seen == nil {
			r.seen = map[string]*pbcatalog.ServiceInstance{}
		}
		r.seen[rc.Name] = si
		r.mu.Unlock()
		return next(rc)
	}
}

func (r *atRun) instance(task string) (*pbcatalog.ServiceInstance, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	si, ok := r.seen[task]
	return si, ok
}

// The agent's default components register a mesh task's service instance
// before its first container starts, and remove it once the task has
// stopped, before the task is reported STOPPED. The service stays.
func TestMeshInitRegistersBeforeTheAppAndDeregistersAfter(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	cfg := config(t, "i-1", pt, srv)
	rec := &atRun{srv: srv, t: t}
	cfg.NewRunner = rec.wrap(pt.newRunner)
	a := startAgent(t, cfg)
	registered(t, srv, a)
	srv.registerDefinition(t, "default", meshDefinition("webapp", pidScript))
	placed := srv.place(t, "default", "t1", "webapp:1", "i-1")
	srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))

	si, ran := rec.instance("t1")
	if !ran {
		t.Fatal("the task's runner was not made")
	}
	if si == nil {
		t.Fatal("no service instance was registered when the task's containers started")
	}
	host, _, _ := net.SplitHostPort(a.Address())
	want := &pbcatalog.ServiceInstance{
		Service: "web", Address: host, Port: 8080,
		Proxy:    &pbcatalog.Proxy{Port: orchestrator.ProxyInboundPort, Mode: catalog.ProxyModeLocal},
		Instance: "i-1", Task: "t1", Tags: []string{"v1"}, Meta: map[string]string{"team": "payments"},
		Checks: []*pbcatalog.CheckDefinition{{Name: "t1/app"}},
	}
	if !proto.Equal(si, want) {
		t.Errorf("registered %v\nwant %v", si, want)
	}
	res, _ := srv.serviceInstance(t, "t1")
	if !proto.Equal(res.GetOwner(), placed.GetId()) {
		t.Errorf("owner %v, want the task %v", res.GetOwner(), placed.GetId())
	}
	svc := srv.list(t, catalog.ServiceType)
	if len(svc) != 1 || svc[0].GetId().GetName() != "web" {
		t.Fatalf("services %v, want web", svc)
	}
	if s, _ := resource.DecodeData[*pbcatalog.Service](svc[0]); s.GetProtocol() != "http" || !s.GetMesh() {
		t.Errorf("service web is %v, want protocol http in the mesh", s)
	}

	srv.editTask(t, "default", "t1", func(tk *pborch.Task) { tk.DesiredStatus = orchestrator.StatusStopped })
	srv.waitTask(t, "default", "t1", "stops", lastStatus(orchestrator.StatusStopped))
	// The STOPPED report waits for the Poststops: the instance is gone.
	if res, _ := srv.serviceInstance(t, "t1"); res != nil {
		t.Errorf("the service instance is still registered once the task is STOPPED: %v", res)
	}
	if svc := srv.list(t, catalog.ServiceType); len(svc) != 1 {
		t.Errorf("services %v after the stop; the service stays", svc)
	}
}

// A task without a mesh block registers nothing.
func TestMeshInitRegistersNothingWithoutAMeshBlock(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	a := startAgent(t, config(t, "i-1", pt, srv))
	registered(t, srv, a)
	srv.registerDefinition(t, "default", shDefinition("pidder", pidScript))
	srv.place(t, "default", "t1", "pidder:1", "i-1")
	srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))
	if got := append(srv.list(t, catalog.ServiceInstanceType), srv.list(t, catalog.ServiceType)...); len(got) != 0 {
		t.Errorf("a task without a mesh block registered %v", got)
	}
}

// An agent killed after the task's Prestart and started again neither
// registers the instance again nor forgets to remove it; a Prestart
// called again (cut short by a kill) writes nothing new.
func TestMeshInitSurvivesAKilledAgent(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	cfg := config(t, "i-1", pt, srv)
	a1 := startAgent(t, cfg)
	registered(t, srv, a1)
	td := meshDefinition("webapp", pidScript)
	srv.registerDefinition(t, "default", td)
	placed := srv.place(t, "default", "t1", "webapp:1", "i-1")
	srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))
	before, _ := srv.serviceInstance(t, "t1")
	if before == nil {
		t.Fatal("no service instance registered")
	}
	a1.kill(t)

	a2 := startAgent(t, cfg)
	srv.waitTask(t, "default", "t1", "is reported by the new agent", func(tk *storedTask) bool {
		return tk.GetSession() == a2.Session() && tk.GetLastStatus() == orchestrator.StatusRunning
	})
	// A Prestart called again, as after a kill in the middle of it.
	host, _, _ := net.SplitHostPort(a2.Address())
	mi, err := meshinit.New(component.Deps{Instance: "i-1", Address: host, Servers: agentServers{a2.Agent}})
	if err != nil {
		t.Fatal(err)
	}
	tk := component.Task{ID: placed.GetId(), Definition: td, Network: component.Network{Mode: orchestrator.NetworkHost}}
	if err := mi.Prestart(context.Background(), tk); err != nil {
		t.Fatalf("Prestart again: %v", err)
	}
	after, _ := srv.serviceInstance(t, "t1")
	// Its generation moves only with its data (health-sync's reports are
	// status, and move its version).
	if after.GetId().GetUid() != before.GetId().GetUid() || after.GetGeneration() != before.GetGeneration() {
		t.Errorf("the instance was written again: uid %s generation %d, was %s %d", after.GetId().GetUid(), after.GetGeneration(), before.GetId().GetUid(), before.GetGeneration())
	}
	if n := len(srv.list(t, catalog.ServiceInstanceType)); n != 1 {
		t.Errorf("%d service instances, want 1", n)
	}

	srv.editTask(t, "default", "t1", func(tk *pborch.Task) { tk.DesiredStatus = orchestrator.StatusStopped })
	srv.waitTask(t, "default", "t1", "stops", lastStatus(orchestrator.StatusStopped))
	if res, _ := srv.serviceInstance(t, "t1"); res != nil {
		t.Errorf("the restarted agent did not remove the service instance: %v", res)
	}
	// Poststop again (after a kill in it): nothing left is no error.
	if err := mi.Poststop(context.Background(), tk); err != nil {
		t.Errorf("Poststop again: %v", err)
	}
}

// Another instance's agent cannot register an instance of a task that
// runs elsewhere, nor take over the one registered, nor report its checks.
func TestAnotherAgentCannotRegisterThisInstancesService(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	a1 := startAgent(t, config(t, "i-1", pt, srv))
	registered(t, srv, a1)
	a2 := startAgent(t, config(t, "i-2", pt, srv))
	registered(t, srv, a2)
	td := meshDefinition("webapp", pidScript)
	srv.registerDefinition(t, "default", td)
	t1 := srv.place(t, "default", "t1", "webapp:1", "i-1")
	srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))
	before, _ := srv.serviceInstance(t, "t1")
	// A task placed on i-3, which has no agent.
	other := srv.write(t, orchestrator.TaskID("default", "t2"), &pborch.Task{TaskDefinition: "webapp:1", Instance: "i-3", StartedBy: "test"})

	host, _, _ := net.SplitHostPort(a2.Address())
	mi, err := meshinit.New(component.Deps{Instance: "i-2", Address: host, Servers: agentServers{a2.Agent}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		task *pbresource.Resource
		want string
	}{
		{other, `data.instance: is "i-2", but task t2 runs on instance "i-3"`},
		{t1, `data.instance: cannot change from "i-1" to "i-2"`},
	} {
		err := mi.Prestart(context.Background(), component.Task{ID: tc.task.GetId(), Definition: td, Network: component.Network{Mode: orchestrator.NetworkHost}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("i-2's Prestart of %s = %v, want a refusal saying %q", tc.task.GetId().GetName(), err, tc.want)
		}
	}
	if res, _ := srv.serviceInstance(t, "t2"); res != nil {
		t.Errorf("i-2 registered t2: %v", res)
	}
	after, si := srv.serviceInstance(t, "t1")
	if after.GetGeneration() != before.GetGeneration() || si.GetInstance() != "i-1" {
		t.Errorf("t1's instance changed: %v", after)
	}
	// Nor may i-2's agent write or delete t1's instance itself, over its
	// link (a proven agent): the servers refuse it.
	forged := proto.Clone(after).(*pbresource.Resource)
	forged.Version = ""
	forgedSI := proto.Clone(si).(*pbcatalog.ServiceInstance)
	forgedSI.Address = "203.0.113.9"
	forged.Data, _ = anypb.New(forgedSI)
	for what, call := range map[string]func(context.Context, pbresource.ResourceServiceClient) error{
		"write": func(ctx context.Context, rs pbresource.ResourceServiceClient) error {
			_, err := rs.Write(ctx, &pbresource.WriteRequest{Resource: forged})
			return err
		},
		"write in a batch": func(ctx context.Context, rs pbresource.ResourceServiceClient) error {
			_, err := rs.WriteBatch(ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{forged}})
			return err
		},
		"delete": func(ctx context.Context, rs pbresource.ResourceServiceClient) error {
			_, err := rs.Delete(ctx, &pbresource.DeleteRequest{Id: after.GetId()})
			return err
		},
	} {
		err := agentServers{a2.Agent}.Call(context.Background(), func(ctx context.Context, cc grpc.ClientConnInterface) error {
			return call(ctx, pbresource.NewResourceServiceClient(cc))
		})
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "on instance i-1: only that instance's agent writes it") {
			t.Errorf("i-2's %s of t1's instance: %v, want PermissionDenied", what, err)
		}
	}
	if now, nowSI := srv.serviceInstance(t, "t1"); now == nil || nowSI.GetAddress() != si.GetAddress() || now.GetGeneration() != before.GetGeneration() {
		t.Errorf("t1's instance after i-2's attempts: %v", now)
	}
	// i-2's mesh-init leaves t1's instance alone at the stop of a task of
	// that name on i-2.
	if err := mi.Poststop(context.Background(), component.Task{ID: t1.GetId(), Definition: td}); err != nil {
		t.Errorf("i-2's Poststop: %v", err)
	}
	if res, _ := srv.serviceInstance(t, "t1"); res == nil {
		t.Error("i-2's Poststop removed i-1's service instance")
	}
	// Nor may it report t1's checks: only i-1's agent does.
	payload, _ := anypb.New(&pbcatalog.ChecksStatus{Checks: []*pbcatalog.CheckStatus{{Name: "t1/app", Status: catalog.CheckPassing}}, Health: catalog.CheckPassing, ReportedAt: timestamppb.Now()})
	err = agentServers{a2.Agent}.Call(context.Background(), func(ctx context.Context, cc grpc.ClientConnInterface) error {
		_, err := pbresource.NewResourceServiceClient(cc).WriteStatus(ctx, &pbresource.WriteStatusRequest{Id: after.GetId(), Key: catalog.AgentChecksStatusKey, Status: &pbresource.Status{Data: payload}})
		return err
	})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("i-2 wrote t1's checks: %v, want PermissionDenied", err)
	}
}

// With the agent's default components, mesh-init registers what
// health-sync reports: a mesh task without health checks has its own
// check, passing while it runs, and the instance is gone once the task is
// STOPPED.
func TestDefaultComponentsRegisterAndReport(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	a := startAgent(t, config(t, "i-1", pt, srv))
	registered(t, srv, a)
	td := shDefinition("webapp", pidScript)
	td.Mesh = &pborch.TaskMesh{Port: 8080}
	srv.registerDefinition(t, "default", td)
	srv.place(t, "default", "t1", "webapp:1", "i-1")
	srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))
	var health *pbcatalog.ChecksStatus
	eventually(t, "the task's own check passes", func() bool {
		res, _ := srv.serviceInstance(t, "t1")
		health = catalog.HealthOf(res)
		return res != nil && len(health.GetChecks()) == 1 && health.GetChecks()[0].GetName() == "t1" && health.GetHealth() == catalog.CheckPassing
	})
	srv.editTask(t, "default", "t1", func(tk *pborch.Task) { tk.DesiredStatus = orchestrator.StatusStopped })
	srv.waitTask(t, "default", "t1", "stops", lastStatus(orchestrator.StatusStopped))
	if res, _ := srv.serviceInstance(t, "t1"); res != nil {
		t.Errorf("the service instance is still registered once the task is STOPPED: %v", res)
	}
}

// A Prestart called again after the task's address changed (a namespace
// set up again) updates the instance it registered, in place: the same
// resource, the new address.
func TestMeshInitUpdatesAMovedAddress(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	a := startAgent(t, config(t, "i-1", pt, srv))
	registered(t, srv, a)
	td := meshDefinition("webapp", pidScript)
	srv.registerDefinition(t, "default", td)
	placed := srv.place(t, "default", "t1", "webapp:1", "i-1")
	srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))
	before, _ := srv.serviceInstance(t, "t1")

	mi, err := meshinit.New(component.Deps{Instance: "i-1", Address: "192.0.2.7", Servers: agentServers{a.Agent}})
	if err != nil {
		t.Fatal(err)
	}
	if err := mi.Prestart(context.Background(), component.Task{ID: placed.GetId(), Definition: td, Network: component.Network{Mode: orchestrator.NetworkHost}}); err != nil {
		t.Fatalf("Prestart: %v", err)
	}
	after, si := srv.serviceInstance(t, "t1")
	if after.GetId().GetUid() != before.GetId().GetUid() || after.GetGeneration() != before.GetGeneration()+1 || si.GetAddress() != "192.0.2.7" {
		t.Errorf("after a Prestart at a new address: uid %s (was %s), generation %d (was %d), address %s",
			after.GetId().GetUid(), before.GetId().GetUid(), after.GetGeneration(), before.GetGeneration(), si.GetAddress())
	}
}
