package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/testlog"
)

// TestForgedStatusKeysAreRefused walks the registry of a server with every
// module: for every type and every status key it declares, a write of
// that key over the public port by anyone but its owner is refused, one
// write, a batch of statuses or a status entry of a WriteBatch, and writes
// nothing: a plain client with no identity,
// the agent of another instance (by its own, valid, session), a claim to
// be the owning agent with a wrong session or another agent's. A PUT over
// HTTP carrying the key does not write it either. The owning agent, by
// its session, does write its task's key: the refusals are not vacuous.
func TestForgedStatusKeysAreRefused(t *testing.T) {
	srv, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702",
		Logger: testlog.Logger(t), ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	runServer(t, srv)
	ctx := context.Background()
	c := pbresource.NewResourceServiceClient(dialGRPC(t, srv.GRPCAddr()))
	waitDefaultNamespace(t, c)
	owner := newFakeAgent(t, "i-1", srv.GRPCAddr())
	owner.register(ctx)
	other := newFakeAgent(t, "i-2", srv.GRPCAddr())
	other.session = "session-of-i-2"
	other.register(ctx)
	as := func(instance, session string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, resource.AgentInstanceMetadataKey, instance, resource.AgentSessionMetadataKey, session)
	}

	// One stored resource of every type that declares status keys; a type
	// that declares some and has none here fails the test.
	samples := map[string]func() *pbresource.ID{
		ids.TypeString(ca.ConfigType): func() *pbresource.ID {
			eventually(t, 30*time.Second, "the CA manager's configuration", func() bool {
				_, err := srv.API().Read(resource.FromOperations(ctx), &pbresource.ReadRequest{Id: ca.ConfigID()})
				return err == nil
			})
			return ca.ConfigID()
		},
		ids.TypeString(scheduler.EnvironmentType): func() *pbresource.ID {
			data, _ := anypb.New(&pbscheduler.Environment{Type: scheduler.TypeDaemon, TaskDefinition: "ls:1"})
			out, err := srv.API().Write(resource.FromOperations(ctx), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: scheduler.EnvironmentID("default", "web"), Data: data}})
			if err != nil {
				t.Fatal(err)
			}
			return out.GetResource().GetId()
		},
		ids.TypeString(scheduler.DeploymentType): func() *pbresource.ID {
			data, _ := anypb.New(&pbscheduler.Deployment{Environment: "web", Version: "v1", Type: scheduler.DeploymentUser})
			out, err := srv.API().Write(resource.FromOperations(ctx), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: scheduler.DeploymentID("default", "d1"), Data: data}})
			if err != nil {
				t.Fatal(err)
			}
			return out.GetResource().GetId()
		},
		ids.TypeString(orchestrator.InstanceType): func() *pbresource.ID { return orchestrator.InstanceID(owner.name) },
		// An instance of a task on i-1: its "agent" key is i-1's agent's,
		// its "catalog-health" key the servers'.
		ids.TypeString(catalog.ServiceInstanceType): func() *pbresource.ID { return writeServiceInstance(t, srv, owner.name, "si-task") },
		ids.TypeString(orchestrator.TaskType): func() *pbresource.ID {
			data, _ := anypb.New(&pborch.Task{TaskDefinition: "web:1", Instance: owner.name, StartedBy: "test"})
			out, err := c.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: orchestrator.TaskID("default", "t1"), Data: data}})
			if err != nil {
				t.Fatal(err)
			}
			return out.GetResource().GetId()
		},
	}
	forgers := []struct {
		name string
		ctx  context.Context
	}{
		{"a plain client", ctx},
		{"the agent of another instance", as(other.name, other.session)},
		{"a claim to be i-1's agent with a wrong session", as(owner.name, "forged")},
		{"a claim to be i-1's agent with i-2's session", as(owner.name, other.session)},
	}
	forged := &pbresource.Status{Conditions: []*pbresource.Condition{{Type: "Forged", State: pbresource.State_STATE_TRUE}}}
	hasForged := func(id *pbresource.ID, key string) bool {
		resp, err := srv.API().Read(resource.FromOperations(ctx), &pbresource.ReadRequest{Id: id})
		if err != nil {
			t.Fatal(err)
		}
		for _, cond := range resp.GetResource().GetStatus()[key].GetConditions() {
			if cond.GetType() == "Forged" {
				return true
			}
		}
		return false
	}
	walked := 0
	for _, reg := range srv.Registry().Types() {
		if len(reg.Statuses) == 0 {
			continue
		}
		typ := ids.TypeString(reg.Type)
		sample, ok := samples[typ]
		if !ok {
			t.Errorf("%s declares status keys, and this test has no sample of it: add one", typ)
			continue
		}
		id := sample()
		for key := range reg.Statuses {
			for _, f := range forgers {
				what := typ + " status[" + key + "] by " + f.name
				req := &pbresource.WriteStatusRequest{Id: id, Key: key, Status: forged}
				_, err := c.WriteStatus(f.ctx, req)
				requirePermissionDenied(t, what, err, `status key "`+key+`"`, "only by its owner")
				resp, err := c.WriteStatuses(f.ctx, &pbresource.WriteStatusesRequest{Statuses: []*pbresource.WriteStatusRequest{req}})
				if err == nil {
					_, err = resource.StatusResult(resp.GetResults()[0])
				}
				requirePermissionDenied(t, what+" (WriteStatuses)", err, `status key "`+key+`"`, "only by its owner")
				// As a status entry of a batch that writes a task too:
				// the batch is refused whole.
				taskData, _ := anypb.New(&pborch.Task{TaskDefinition: "web:1", Instance: owner.name, StartedBy: "test"})
				_, err = c.WriteBatch(f.ctx, &pbresource.WriteBatchRequest{
					Resources: []*pbresource.Resource{{Id: orchestrator.TaskID("default", "forged-batch"), Data: taskData}},
					Statuses:  []*pbresource.WriteStatusRequest{req},
				})
				requirePermissionDenied(t, what+" (WriteBatch)", err, `status key "`+key+`"`, "only by its owner")
				if _, err := srv.API().Read(resource.FromOperations(ctx), &pbresource.ReadRequest{Id: orchestrator.TaskID("default", "forged-batch")}); status.Code(err) != codes.NotFound {
					t.Fatalf("%s: the refused batch wrote its task: %v", what, err)
				}
				if hasForged(id, key) {
					t.Fatalf("%s: written", what)
				}
			}
			putWithStatus(t, srv, id, key)
			if hasForged(id, key) {
				t.Fatalf("%s status[%s] written by an HTTP PUT", typ, key)
			}
			walked++
		}
	}
	if walked < 8 {
		t.Fatalf("walked %d status keys; the registry declares at least 8", walked)
	}

	// The owner, proven by its session, writes its task's report.
	payload, _ := anypb.New(&pborch.TaskStatus{LastStatus: orchestrator.StatusRunning})
	if _, err := c.WriteStatus(as(owner.name, owner.session), &pbresource.WriteStatusRequest{Id: orchestrator.TaskID("default", "t1"), Key: orchestrator.TaskStatusKey,
		Status: &pbresource.Status{Data: payload}}); err != nil {
		t.Fatalf("the agent of i-1 reporting its task: %v", err)
	}
	if got := readTask(t, c, "t1"); got.GetLastStatus() != orchestrator.StatusRunning {
		t.Fatalf("the agent's report: %v", got)
	}

	// And its service instance's checks; the other agent, by its own
	// valid session, is refused them with a well-formed payload too.
	checks := &pbcatalog.ChecksStatus{Checks: []*pbcatalog.CheckStatus{{Name: "si-task", Status: catalog.CheckPassing}}, Health: catalog.CheckPassing, ReportedAt: timestamppb.Now()}
	payload, _ = anypb.New(checks)
	req := &pbresource.WriteStatusRequest{Id: catalog.ServiceInstanceID("default", "si-task"), Key: catalog.AgentChecksStatusKey, Status: &pbresource.Status{Data: payload}}
	_, err = c.WriteStatus(as(other.name, other.session), req)
	requirePermissionDenied(t, "i-2's agent reporting i-1's service instance", err, "only by its owner, the agent of instance i-1")
	if _, err := c.WriteStatus(as(owner.name, owner.session), req); err != nil {
		t.Fatalf("the agent of i-1 reporting its service instance: %v", err)
	}
	resp, err := c.Read(ctx, &pbresource.ReadRequest{Id: catalog.ServiceInstanceID("default", "si-task")})
	if err != nil {
		t.Fatal(err)
	}
	if h := catalog.HealthOf(resp.GetResource()); h.GetHealth() != catalog.CheckPassing {
		t.Fatalf("the service instance's health after its agent's report: %v", h)
	}
}

// writeServiceInstance writes, in process, a task on instance and a
// ServiceInstance of it owned by it, both called name, and returns the
// instance's id.
func writeServiceInstance(t *testing.T, srv *server.Server, instance, name string) *pbresource.ID {
	t.Helper()
	ctx := resource.FromOperations(context.Background())
	taskData, _ := anypb.New(&pborch.Task{TaskDefinition: "web:1", Instance: instance, StartedBy: "test"})
	task, err := srv.API().Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: orchestrator.TaskID("default", name), Data: taskData}})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := anypb.New(&pbcatalog.ServiceInstance{Service: "web", Address: "10.0.0.1", Port: 8080, Instance: instance, Task: name,
		Checks: []*pbcatalog.CheckDefinition{{Name: name}}})
	out, err := srv.API().Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: catalog.ServiceInstanceID("default", name), Owner: task.GetResource().GetId(), Data: data}})
	if err != nil {
		t.Fatal(err)
	}
	return out.GetResource().GetId()
}

func requirePermissionDenied(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("%s: %v, want PermissionDenied", what, err)
	}
	for _, w := range want {
		if !strings.Contains(status.Convert(err).Message(), w) {
			t.Fatalf("%s: %q does not say %q", what, status.Convert(err).Message(), w)
		}
	}
}

// putWithStatus reads the resource over HTTP and PUTs it back carrying a
// forged status[key], alone and through /v1/batch; whatever the answers,
// the caller checks the key.
func putWithStatus(t *testing.T, srv *server.Server, id *pbresource.ID, key string) {
	t.Helper()
	path := "http://" + srv.HTTPAddr() + "/v1/resources/" + id.GetType().GetGroup() + "/" + id.GetType().GetGroupVersion() + "/" + id.GetType().GetKind() + "/" + id.GetName()
	resp, err := http.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	var res map[string]any
	err = json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	st, _ := res["status"].(map[string]any)
	if st == nil {
		st = map[string]any{}
	}
	st[key] = map[string]any{"conditions": []any{map[string]any{"type": "Forged", "state": "STATE_TRUE"}}}
	res["status"] = st
	body, _ := json.Marshal(res)
	// As one resource, and in a batch.
	batch, _ := json.Marshal(map[string]any{"resources": []any{res}})
	for _, put := range []struct{ url, body string }{{path, string(body)}, {"http://" + srv.HTTPAddr() + "/v1/batch", string(batch)}} {
		req, _ := http.NewRequest(http.MethodPut, put.url, strings.NewReader(put.body))
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
