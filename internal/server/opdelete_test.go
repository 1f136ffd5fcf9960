package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/testlog"
)

// The attack of issue 23 on a server with the default modules: with a
// deployment in progress, DELETE /v1/environments/victim-env answers 409,
// and so does the generic delete of the environment, on every path, naming
// the operation; the generic delete of the active CA root is refused,
// saying to rotate. Then every type the registry says is deleted only
// through its operations (written through them, sealed or permanent) is
// refused by the generic delete over HTTP, gRPC and in process, for every
// stored resource of it and for a name that is not stored, and nothing is
// deleted; so a type registered later is covered without a change here.
// The operation itself still deletes the environment.
func TestGenericDeleteOfOperationOnlyTypes(t *testing.T) {
	const ttl = time.Second
	srv, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702",
		Modules: heartbeatTTL(t, ttl), Logger: testlog.Logger(t), ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	runServer(t, srv)
	base := "http://" + srv.HTTPAddr()
	waitHealthy(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ops := resource.FromOperations(ctx)
	api := srv.API()
	grpcc := pbresource.NewResourceServiceClient(dialGRPC(t, srv.GRPCAddr()))
	waitDefaultNamespace(t, grpcc)

	// A victim environment with a deployment in progress: an agent that
	// heartbeats but never runs its task keeps it in progress.
	agent := newFakeAgent(t, "i-1", srv.GRPCAddr())
	agent.register(ctx)
	stopAgent := agent.run(ctx, ttl/5)
	defer stopAgent()
	mustHTTP(t, "PUT", base+"/v1/resources/orchestrator/v1/TaskDefinition/ls-1",
		`{"data":{"family":"ls","revision":1,"containers":[{"name":"main","driver":"exec","command":["sleep","1000"]}]}}`, http.StatusOK)
	mustHTTP(t, "POST", base+"/v1/environments", `{"name":"victim-env","task_definition":"ls:1","instance_group":{"attributes":["zone=a"]}}`, http.StatusOK)
	mustHTTP(t, "POST", base+"/v1/environments/victim-env/deployments", "", http.StatusOK)
	var depID string
	eventually(t, time.Minute, "the deployment in progress with its task placed", func() bool {
		l, err := api.List(ctx, &pbresource.ListRequest{Type: scheduler.DeploymentType, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
		if err != nil || len(l.GetResources()) != 1 {
			return false
		}
		d, _ := scheduler.DecodeDeployment(l.GetResources()[0])
		depID = l.GetResources()[0].GetId().GetName()
		return d.GetStatus() == scheduler.StatusInProgress && len(ownedTasks(t, ctx, srv, l.GetResources()[0].GetOwner())) > 0
	})
	var activeRoot *pbresource.Resource
	eventually(t, time.Minute, "the CA's active root", func() bool {
		l, err := api.List(ctx, &pbresource.ListRequest{Type: ca.RootType, Tenancy: &pbresource.Tenancy{}})
		if err != nil {
			return false
		}
		for _, r := range l.GetResources() {
			if root, err := resource.DecodeData[*pbca.CARoot](r); err == nil && root.GetActive() {
				activeRoot = r
			}
		}
		return activeRoot != nil
	})

	envID := scheduler.EnvironmentID("default", "victim-env")
	code, msg := httpError(t, "DELETE", base+"/v1/environments/victim-env")
	if code != http.StatusConflict || !strings.Contains(msg, "in progress") {
		t.Fatalf("DELETE /v1/environments/victim-env = %d %q, want 409: a deployment is in progress", code, msg)
	}
	for path, err := range deleteEverywhere(t, ctx, base, srv, envID) {
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "use DELETE /v1/environments/{name} (trellis env delete)") {
			t.Errorf("generic delete of the environment (%s) = %v, want FailedPrecondition naming the operation", path, err)
		}
	}
	for path, err := range deleteEverywhere(t, ctx, base, srv, activeRoot.GetId()) {
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "active root") || !strings.Contains(err.Error(), "trellis ca rotate") {
			t.Errorf("generic delete of the active root (%s) = %v, want FailedPrecondition saying to rotate", path, err)
		}
	}

	// Every type deleted only through its operations, on every path.
	var stored []*pbresource.Resource
	covered := map[string]bool{}
	for _, reg := range srv.Registry().Types() {
		if !reg.DeletedThroughOperations() {
			continue
		}
		ten := &pbresource.Tenancy{Namespace: "default"}
		if reg.Scope == resource.ScopeCluster {
			ten = &pbresource.Tenancy{}
		}
		l, err := api.List(ops, &pbresource.ListRequest{Type: reg.Type, Tenancy: ten})
		if err != nil {
			t.Fatal(err)
		}
		absent := &pbresource.ID{Type: reg.Type, Tenancy: ten, Name: "not-stored"}
		for _, id := range append([]*pbresource.ID{absent}, idsOf(l.GetResources())...) {
			for path, err := range deleteEverywhere(t, ctx, base, srv, id) {
				checkOperationOnlyRefusal(t, reg, path, id, err)
			}
		}
		stored = append(stored, l.GetResources()...)
		if len(l.GetResources()) > 0 {
			covered[reg.Type.GetKind()] = true
		}
	}
	for _, kind := range []string{"Environment", "EnvironmentVersion", "Deployment", "CAConfig", "CARoot", "CASigningKey", "Cluster"} {
		if !covered[kind] {
			t.Errorf("no stored %s was tried: the test's setup is incomplete, or the type is no longer deleted only through its operations", kind)
		}
	}
	// Nothing was deleted.
	for _, res := range stored {
		got, err := api.Read(ops, &pbresource.ReadRequest{Id: res.GetId(), Consistent: true})
		if err != nil || got.GetResource().GetId().GetUid() != res.GetId().GetUid() {
			t.Errorf("after the refused deletes %s is %v, %v; want it still stored", ids.String(res.GetId()), got.GetResource().GetId(), err)
		}
	}
	if n := len(ownedTasks(t, ctx, srv, envIDWithUID(t, ctx, srv, envID))); n == 0 {
		t.Error("the environment's tasks are gone after the refused deletes")
	}

	// The operation still deletes it: stop the deployment, delete the
	// environment; once the agent is gone, its tasks are lost and the
	// scheduler removes it.
	mustHTTP(t, "POST", base+"/v1/environments/victim-env/deployments/"+depID+"/stop", "", http.StatusOK)
	// The scheduler reports on the environment as the stop lands: the
	// delete answers conflict ("retry") when it wrote in between.
	eventually(t, time.Minute, "the environment's delete to be taken", func() bool {
		code, body := httpDo(t, "DELETE", base+"/v1/environments/victim-env", "")
		if code != http.StatusOK && !strings.Contains(body, `"code":"conflict"`) {
			t.Fatalf("DELETE /v1/environments/victim-env = %d %s", code, body)
		}
		return code == http.StatusOK
	})
	stopAgent()
	eventually(t, time.Minute, "the scheduler to remove the deleted environment", func() bool {
		_, err := api.Read(ctx, &pbresource.ReadRequest{Id: envID, Consistent: true})
		return status.Code(err) == codes.NotFound
	})
}

// deleteEverywhere deletes id by the generic delete over HTTP, gRPC and
// in process (without FromOperations), and returns each path's error as a
// status error (an HTTP answer's code mapped back).
func deleteEverywhere(t *testing.T, ctx context.Context, base string, srv *server.Server, id *pbresource.ID) map[string]error {
	t.Helper()
	u := base + "/v1/resources/" + ids.TypeString(id.GetType()) + "/" + url.PathEscape(id.GetName())
	if ns := id.GetTenancy().GetNamespace(); ns != "" {
		u += "?namespace=" + url.QueryEscape(ns)
	}
	out := map[string]error{}
	code, msg := httpError(t, "DELETE", u)
	switch code {
	case http.StatusOK:
		out["HTTP"] = nil
	case http.StatusConflict:
		out["HTTP"] = status.Error(codes.FailedPrecondition, msg)
	case http.StatusForbidden:
		out["HTTP"] = status.Error(codes.PermissionDenied, msg)
	default:
		out["HTTP"] = status.Errorf(codes.Unknown, "HTTP %d: %s", code, msg)
	}
	_, out["gRPC"] = pbresource.NewResourceServiceClient(dialGRPC(t, srv.GRPCAddr())).Delete(ctx, &pbresource.DeleteRequest{Id: id})
	_, out["in process"] = srv.API().Delete(ctx, &pbresource.DeleteRequest{Id: id})
	return out
}

// checkOperationOnlyRefusal checks the refusal of a generic delete of a
// type deleted only through its operations: 403 for a sealed type (which
// names nothing of the resource), 409 naming why otherwise.
func checkOperationOnlyRefusal(t *testing.T, reg resource.Registration, path string, id *pbresource.ID, err error) {
	t.Helper()
	msg := status.Convert(err).Message()
	switch {
	case reg.Sealed:
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(msg, "is sealed") {
			t.Errorf("%s: delete of sealed %s = %v, want PermissionDenied", path, ids.String(id), err)
		}
	case reg.Permanent:
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(msg, "is permanent") {
			t.Errorf("%s: delete of permanent %s = %v, want FailedPrecondition", path, ids.String(id), err)
		}
	default:
		how := reg.DeletedThrough
		if how == "" {
			how = reg.WrittenThrough
		}
		if status.Code(err) != codes.FailedPrecondition || !(strings.Contains(msg, how) || reg.DeleteRefusal != nil && strings.Contains(msg, ids.String(id))) {
			t.Errorf("%s: delete of %s = %v, want FailedPrecondition naming how it is deleted (%s)", path, ids.String(id), err, how)
		}
	}
}

func idsOf(rs []*pbresource.Resource) []*pbresource.ID {
	out := make([]*pbresource.ID, len(rs))
	for i, r := range rs {
		out[i] = r.GetId()
	}
	return out
}

// ownedTasks lists the tasks owner owns.
func ownedTasks(t *testing.T, ctx context.Context, srv *server.Server, owner *pbresource.ID) []*pbresource.Resource {
	t.Helper()
	l, err := srv.API().ListByOwner(ctx, &pbresource.ListByOwnerRequest{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	var out []*pbresource.Resource
	for _, r := range l.GetResources() {
		if ids.SameType(r.GetId().GetType(), orchestrator.TaskType) {
			out = append(out, r)
		}
	}
	return out
}

func envIDWithUID(t *testing.T, ctx context.Context, srv *server.Server, id *pbresource.ID) *pbresource.ID {
	t.Helper()
	got, err := srv.API().Read(ctx, &pbresource.ReadRequest{Id: id, Consistent: true})
	if err != nil {
		t.Fatal(err)
	}
	return got.GetResource().GetId()
}

// httpError sends a request without a body and returns the answer's code
// and, for an error, its message.
func httpError(t *testing.T, method, u string) (int, string) {
	t.Helper()
	code, body := httpDo(t, method, u, "")
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal([]byte(body), &e)
	return code, e.Error
}

func mustHTTP(t *testing.T, method, u, body string, want int) {
	t.Helper()
	if code, got := httpDo(t, method, u, body); code != want {
		t.Fatalf("%s %s = %d %s, want %d", method, u, code, got, want)
	}
}
