package taskrun

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pbcore "trellis.dev/trellis/api/core/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

type loneServer struct{}

func (loneServer) Leader() string           { return "127.0.0.1:7702" }
func (loneServer) Peers() ([]string, error) { return []string{"127.0.0.1:7702"}, nil }
func (loneServer) Health() wire.Health      { return wire.Health{Status: "ok"} }

// runWorld is a store with instances, task definitions and a task holding
// 8080/tcp on i1, served by the task run route alone over HTTP.
type runWorld struct {
	t      *testing.T
	api    *resource.Service
	url    string
	holder *pbresource.Resource
	// feed, when set, brings the cache in line with the store, as the
	// leader's watches do.
	feed func()
}

func newRunWorld(t *testing.T, cache *controller.Cache) *runWorld {
	t.Helper()
	reg := resource.NewRegistry()
	core.Register(reg)
	orchestrator.Register(reg)
	api := resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg})
	if err := core.Bootstrap(context.Background(), api); err != nil {
		t.Fatal(err)
	}
	handler, err := httpapi.New(httpapi.Config{API: api, Registry: reg, Cluster: loneServer{},
		Routes: []httpapi.Route{Route(api, reg, cache)}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(func() {
		handler.Shutdown()
		srv.Close()
	})
	w := &runWorld{t: t, api: api, url: srv.URL}
	ready := func(attrs map[string]string) *pborch.Instance {
		return &pborch.Instance{Cluster: "default", Status: orchestrator.InstanceReady, Attributes: attrs}
	}
	w.store(orchestrator.InstanceID("i1"), ready(map[string]string{orchestrator.AttrNetworkBridge: "true"}))
	w.store(orchestrator.InstanceID("i2"), ready(map[string]string{orchestrator.AttrNetworkBridge: "false"}))
	draining := ready(map[string]string{orchestrator.AttrNetworkBridge: "true"})
	draining.Status = orchestrator.InstanceDraining
	w.store(orchestrator.InstanceID("i3"), draining)
	noExec := ready(map[string]string{orchestrator.AttrNetworkBridge: "true"})
	noExec.Drivers = []*pborch.DriverInfo{{Name: "exec", Available: false}, {Name: "docker", Available: true}}
	w.store(orchestrator.InstanceID("i4"), noExec)
	def := func(family string, hostPort uint32) *pborch.TaskDefinition {
		return &pborch.TaskDefinition{Family: family, Revision: 1, Network: "bridge",
			Containers: []*pborch.ContainerDefinition{{Name: "main", Driver: "exec", Command: []string{"sleep", "1000"}}},
			Ports:      []*pborch.PortMapping{{Name: "http", ContainerPort: 80, HostPort: hostPort}}}
	}
	w.store(core.NamespaceID("team-b"), &pbcore.Namespace{})
	w.store(orchestrator.TaskDefinitionID("default", "web", 1), def("web", 8080))
	w.store(orchestrator.TaskDefinitionID("default", "any", 1), def("any", 0))
	w.store(orchestrator.TaskDefinitionID("team-b", "api", 1), def("api", 8080))
	w.holder = w.store(orchestrator.TaskID("team-b", "01jholder"), &pborch.Task{TaskDefinition: "api:1", Instance: "i1", DesiredStatus: orchestrator.StatusRunning})
	w.report(w.holder, orchestrator.StatusRunning)
	return w
}

func (w *runWorld) store(id *pbresource.ID, m proto.Message) *pbresource.Resource {
	w.t.Helper()
	data, err := anypb.New(m)
	if err != nil {
		w.t.Fatal(err)
	}
	out, err := w.api.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: id, Data: data}})
	if err != nil {
		w.t.Fatalf("write %s: %v", id.GetName(), err)
	}
	return out.GetResource()
}

func (w *runWorld) report(r *pbresource.Resource, last string) {
	w.t.Helper()
	data, err := anypb.New(&pborch.TaskStatus{LastStatus: last})
	if err != nil {
		w.t.Fatal(err)
	}
	task, err := resource.DecodeData[*pborch.Task](r)
	if err != nil {
		w.t.Fatal(err)
	}
	// As the agent of the task's instance, which alone writes the key.
	if _, err := w.api.WriteStatus(resource.AsAgent(context.Background(), task.GetInstance()), &pbresource.WriteStatusRequest{Id: r.GetId(), Key: orchestrator.TaskStatusKey,
		Status: &pbresource.Status{ObservedGeneration: r.GetGeneration(), Data: data}}); err != nil {
		w.t.Fatal(err)
	}
}

// run posts a task run in namespace ns and returns the status, and the
// error's message or the task's name.
func (w *runWorld) run(ns, body string) (int, string) {
	w.t.Helper()
	if w.feed != nil {
		w.feed()
	}
	resp, err := http.Post(w.url+"/v1/tasks/run?namespace="+ns, "application/json", strings.NewReader(body))
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Error string         `json:"error"`
		Task  *wire.Resource `json:"task"`
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		w.t.Fatal(err)
	}
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		w.t.Fatalf("%d %s: %v", resp.StatusCode, buf.String(), err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp.StatusCode, out.Task.ID.Name
	}
	return resp.StatusCode, out.Error
}

func (w *runWorld) tasks(ns string) int {
	w.t.Helper()
	list, err := w.api.List(context.Background(), &pbresource.ListRequest{Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: ns}})
	if err != nil {
		w.t.Fatal(err)
	}
	return len(list.GetResources())
}

// The server decides a task run's placement, and refuses, before it
// writes anything, a fixed host port a live task holds on the instance
// (naming the port, the instance and the task), an instance that cannot
// run bridge tasks or lacks a driver, one that is not ready, and bad
// input naming the field. It answers the same from the store (a server
// that does not lead), from a cache that is not listed yet (a follower's,
// which must not read as "no holders"), and from the leader's cache.
func TestTaskRunDecidedByTheServer(t *testing.T) {
	for _, mode := range []string{"store", "unsynced cache", "leader's cache"} {
		t.Run(mode, func(t *testing.T) {
			var cache *controller.Cache
			if mode != "store" {
				cache = controller.NewCache(controller.CheckReadOnly())
				if err := cache.Declare(orchestrator.HostPortsCached...); err != nil {
					t.Fatal(err)
				}
			}
			w := newRunWorld(t, cache)
			if mode == "leader's cache" {
				w.feed = func() {
					for _, ct := range orchestrator.HostPortsCached {
						list, err := w.api.List(context.Background(), &pbresource.ListRequest{Type: ct.Type, Tenancy: &pbresource.Tenancy{Namespace: ids.WildcardNamespace}})
						if err != nil {
							t.Fatal(err)
						}
						for _, r := range list.GetResources() {
							cache.Apply(controller.Event{Resource: r})
						}
						cache.MarkSynced(ct.Type)
					}
				}
				t.Cleanup(func() {
					if err := cache.Verify(); err != nil {
						t.Error(err)
					}
				})
			}
			for _, tc := range []struct {
				name, ns, body string
				code           int
				want           string
			}{
				{"a fixed host port held by a task of another namespace", "default", `{"task_definition":"web:1","instance":"i1"}`,
					http.StatusConflict, "instance i1 cannot run web:1: host port 8080/tcp is taken by task team-b/01jholder"},
				{"the holder's own namespace names it by name", "team-b", `{"task_definition":"api:1","instance":"i1"}`,
					http.StatusConflict, "instance i1 cannot run api:1: host port 8080/tcp is taken by task 01jholder"},
				{"bridge where the instance cannot", "default", `{"task_definition":"web:1","instance":"i2"}`,
					http.StatusConflict, "instance i2 cannot run web:1: the task definition's network is bridge, and the instance cannot run bridge tasks (network.bridge=false)"},
				{"an instance that is not ready", "default", `{"task_definition":"web:1","instance":"i3"}`,
					http.StatusConflict, "instance i3 is draining: tasks are placed only on ready instances"},
				{"a driver the instance lacks", "default", `{"task_definition":"web:1","instance":"i4"}`,
					http.StatusConflict, "instance i4 cannot run container main: driver exec is not available there"},
				{"an unknown instance", "default", `{"task_definition":"web:1","instance":"i9"}`,
					http.StatusNotFound, `instance "i9" is not registered`},
				{"an unknown definition", "default", `{"task_definition":"web:7","instance":"i1"}`,
					http.StatusNotFound, "task definition web:7 is not registered in namespace default"},
				{"no revision", "default", `{"task_definition":"web","instance":"i1"}`,
					http.StatusBadRequest, "task_definition"},
				{"no instance", "default", `{"task_definition":"web:1"}`,
					http.StatusBadRequest, "instance"},
				{"an unknown field", "default", `{"task_definition":"web:1","instance":"i1","name":"mine"}`,
					http.StatusBadRequest, "name"},
				{"a started_by over the limit", "default", `{"task_definition":"any:1","instance":"i1","started_by":"` + strings.Repeat("x", orchestrator.MaxStartedByLength+1) + `"}`,
					http.StatusBadRequest, "started_by"},
			} {
				code, msg := w.run(tc.ns, tc.body)
				if code != tc.code || !strings.Contains(msg, tc.want) {
					t.Errorf("%s: %d %q, want %d with %q", tc.name, code, msg, tc.code, tc.want)
				}
			}
			if n := w.tasks(ids.WildcardNamespace); n != 1 {
				t.Fatalf("%d tasks stored after refused runs, want the holder alone", n)
			}

			// A definition whose host port the agent picks clashes with
			// nothing.
			if code, msg := w.run("default", `{"task_definition":"any:1","instance":"i1"}`); code != http.StatusOK {
				t.Fatalf("any:1 beside the holder: %d %s", code, msg)
			}
			// The holder stops: 8080 is free, and the task run there
			// holds it in turn.
			w.report(w.holder, orchestrator.StatusStopped)
			code, first := w.run("default", `{"task_definition":"web:1","instance":"i1","started_by":"release-42"}`)
			if code != http.StatusOK {
				t.Fatalf("web:1 once 8080 is free: %d %s", code, first)
			}
			code, msg := w.run("team-b", `{"task_definition":"api:1","instance":"i1"}`)
			if want := "host port 8080/tcp is taken by task default/" + first; code != http.StatusConflict || !strings.Contains(msg, want) {
				t.Fatalf("api:1 beside the task just run: %d %q, want %q", code, msg, want)
			}
			got, err := w.api.Read(context.Background(), &pbresource.ReadRequest{Id: orchestrator.TaskID("default", first)})
			if err != nil {
				t.Fatal(err)
			}
			task, err := resource.DecodeData[*pborch.Task](got.GetResource())
			if err != nil {
				t.Fatal(err)
			}
			if task.GetTaskDefinition() != "web:1" || task.GetInstance() != "i1" || task.GetStartedBy() != "release-42" || task.GetDesiredStatus() != orchestrator.StatusRunning {
				t.Fatalf("the task run: %v", task)
			}
		})
	}
}
