package catalogmodule_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	consul "github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/types/known/anypb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

func (h *consulHarness) put(t *testing.T, path, token, body string) (int, wire.Error) {
	t.Helper()
	req, _ := http.NewRequest("PUT", h.url+path, bytes.NewBufferString(body))
	if token != "" {
		req.Header.Set("X-Trellis-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e wire.Error
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, e
}

func (h *consulHarness) serverChecks(t *testing.T, ns, name string) *pbcatalog.ChecksStatus {
	t.Helper()
	out, err := h.api.Read(context.Background(), &pbresource.ReadRequest{Id: catalog.ServiceInstanceID(ns, name)})
	if err != nil {
		t.Fatal(err)
	}
	return catalog.ServerChecksOf(out.GetResource())
}

// The refresh of a TTL check: a caller with namespace:write sets it, and
// Consul's health answer shows it; a caller without the permission, a
// check the instance does not have, a bad status, and an instance of a
// task (whose checks are its agent's) are refused, each by name, and
// nothing is written.
func TestRefreshTTLCheckOperation(t *testing.T) {
	h := newConsulHarness(t)
	h.register(t, "default", "db-1", "db", "10.0.0.9", 5432)
	path := catalog.ChecksPath + "/db-1/checks/alive"

	if code, e := h.put(t, path, "writer", `{"status":"warning","note":"replica lag 3s"}`); code != http.StatusOK {
		t.Fatalf("refresh = %d %v", code, e)
	}
	if cs := h.serverChecks(t, "default", "db-1"); cs.GetHealth() != catalog.CheckWarning || cs.GetChecks()[0].GetOutput() != "replica lag 3s" {
		t.Fatalf("after the refresh: %v", cs)
	}
	entries, _, err := h.client.Health().Service("db", "", false, &consul.QueryOptions{RequireConsistent: true})
	if err != nil || len(entries) != 1 || entries[0].Checks[0].Status != "warning" || entries[0].Checks[0].Output != "replica lag 3s" {
		t.Fatalf("Consul's answer after the refresh: %+v, %v", entries, err)
	}

	// A task and its instance, whose checks the agent of i-1 reports.
	ctx := context.Background()
	taskData, _ := anypb.New(&pborch.Task{TaskDefinition: "api:1", Instance: "i-1", StartedBy: "test"})
	task, err := h.api.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: orchestrator.TaskID("default", "api-1"), Data: taskData}})
	if err != nil {
		t.Fatal(err)
	}
	siData, _ := anypb.New(&pbcatalog.ServiceInstance{Service: "api", Address: "10.0.0.1", Port: 80, Instance: "i-1", Task: "api-1",
		Checks: []*pbcatalog.CheckDefinition{{Name: "api-1"}}})
	if _, err := h.api.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: catalog.ServiceInstanceID("default", "api-1"), Owner: task.GetResource().GetId(), Data: siData}}); err != nil {
		t.Fatal(err)
	}

	before := h.serverChecks(t, "default", "db-1")
	for _, tc := range []struct {
		name, path, token, body string
		code                    int
		want                    string
	}{
		{"no token", path, "", `{"status":"passing"}`, http.StatusForbidden, "namespace:write"},
		{"a reader", path, "reader", `{"status":"passing"}`, http.StatusForbidden, "namespace:write"},
		{"a writer of another namespace", path + "?namespace=payments", "writer", `{"status":"passing"}`, http.StatusForbidden, "namespace:write"},
		{"a check it does not have", catalog.ChecksPath + "/db-1/checks/disk", "writer", `{"status":"passing"}`, http.StatusBadRequest, `check: default/db-1: check "disk": no such check`},
		{"a status that is none", path, "writer", `{"status":"ok"}`, http.StatusBadRequest, `status: status "ok": not a check status`},
		{"an unknown field", path, "writer", `{"state":"passing"}`, http.StatusBadRequest, "state"},
		{"an instance of a task", catalog.ChecksPath + "/api-1/checks/api-1", "writer", `{"status":"passing"}`, http.StatusConflict, "its checks are its agent's"},
		{"an instance that does not exist", catalog.ChecksPath + "/nope/checks/alive", "writer", `{"status":"passing"}`, http.StatusNotFound, ""},
	} {
		code, e := h.put(t, tc.path, tc.token, tc.body)
		if code != tc.code || !strings.Contains(e.Error, tc.want) {
			t.Errorf("%s: %d %v, want %d naming %q", tc.name, code, e, tc.code, tc.want)
		}
	}
	if after := h.serverChecks(t, "default", "db-1"); !after.GetReportedAt().AsTime().Equal(before.GetReportedAt().AsTime()) {
		t.Fatalf("a refused refresh wrote: %v", after)
	}
	if cs := h.serverChecks(t, "default", "api-1"); cs != nil {
		t.Fatalf("a refused refresh wrote the servers' key of an instance of a task: %v", cs)
	}
	// The agent's key of a task's instance is not the servers' either.
	if _, err := h.api.WriteStatus(resource.AsAgent(ctx, "i-2"), &pbresource.WriteStatusRequest{Id: catalog.ServiceInstanceID("default", "api-1"), Key: catalog.AgentChecksStatusKey, Status: &pbresource.Status{}}); err == nil {
		t.Fatal("the agent of another instance wrote the checks of a task's instance")
	}
}
