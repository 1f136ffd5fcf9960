package command

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pbcore "trellis.dev/trellis/api/core/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/orchestrator/taskrun"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

type loneServer struct{}

func (loneServer) Leader() string           { return "127.0.0.1:7702" }
func (loneServer) Peers() ([]string, error) { return []string{"127.0.0.1:7702"}, nil }
func (loneServer) Health() wire.Health      { return wire.Health{Status: "ok"} }

// testServer is the HTTP API over an in-memory store; it returns the
// store, to write what agents would, and the server's address.
func testServer(t *testing.T) (*resource.Service, string) {
	t.Helper()
	return testServerWrapped(t, func(h http.Handler) http.Handler { return h })
}

// testServerWrapped is testServer with its handler wrapped, to see the
// requests it is sent.
func testServerWrapped(t *testing.T, wrap func(http.Handler) http.Handler) (*resource.Service, string) {
	t.Helper()
	reg := testTypes()
	api := resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg})
	if err := core.Bootstrap(context.Background(), api); err != nil {
		t.Fatal(err)
	}
	// The orchestrator's task run operation, as a server that does not
	// lead (no cache) serves it: the placement is checked from the store.
	handler, err := httpapi.New(httpapi.Config{API: api, Registry: reg, Cluster: loneServer{},
		Routes: []httpapi.Route{taskrun.Route(api, reg, nil)}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(wrap(handler))
	t.Cleanup(func() {
		handler.Shutdown()
		srv.Close()
	})
	return api, srv.URL
}

func store(t *testing.T, api *resource.Service, id *pbresource.ID, m proto.Message) *pbresource.Resource {
	t.Helper()
	data, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	out, err := api.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: id, Data: data}})
	if err != nil {
		t.Fatalf("write %s: %v", id.GetName(), err)
	}
	return out.GetResource()
}

func report(t *testing.T, api *resource.Service, r *pbresource.Resource, st *pborch.TaskStatus) {
	t.Helper()
	data, err := anypb.New(st)
	if err != nil {
		t.Fatal(err)
	}
	task, err := resource.DecodeData[*pborch.Task](r)
	if err != nil {
		t.Fatal(err)
	}
	// As the agent of the task's instance reports it.
	if _, err := api.WriteStatus(resource.AsAgent(context.Background(), task.GetInstance()), &pbresource.WriteStatusRequest{Id: r.GetId(), Key: orchestrator.TaskStatusKey,
		Status: &pbresource.Status{ObservedGeneration: r.GetGeneration(), Data: data}}); err != nil {
		t.Fatal(err)
	}
}

// runCLI runs `trellis task ARGS...` against addr.
func runCLI(addr string, args ...string) (string, error) {
	return runTrellis(addr, newTaskCmd, append([]string{"task"}, args...)...)
}

// runTrellis runs `trellis ARGS...` against addr, with the command that
// newCmd makes as the root's one subcommand.
func runTrellis(addr string, newCmd func(*cli.Env) *cobra.Command, args ...string) (string, error) {
	var out bytes.Buffer
	vars := map[string]string{"TRELLIS_ADDR": addr}
	e := &cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: io.Discard, Getenv: func(k string) string { return vars[k] }, Now: time.Now}
	root := &cobra.Command{Use: "trellis", SilenceErrors: true, SilenceUsage: true}
	e.ClientFlags.Register(root.PersistentFlags())
	root.AddCommand(newCmd(e))
	root.SetArgs(args)
	root.SetOut(io.Discard)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// `trellis task run` is refused by the server, before anything is
// written, where the scheduler would not place: a bridge task on an
// instance without network.bridge=true, and a fixed host port a live task
// holds there (of any namespace), the refusal naming the port, the
// instance and the task.
func TestTaskRunChecksNetworkAndHostPorts(t *testing.T) {
	api, addr := testServer(t)
	for name, attrs := range map[string]map[string]string{
		"i1": {orchestrator.AttrNetworkBridge: "true"},
		"i2": {orchestrator.AttrNetworkBridge: "false"},
	} {
		store(t, api, orchestrator.InstanceID(name), &pborch.Instance{Cluster: "default", Status: orchestrator.InstanceReady, Attributes: attrs})
	}
	web := func(family string) *pborch.TaskDefinition {
		return &pborch.TaskDefinition{Family: family, Revision: 1, Network: "bridge",
			Containers: []*pborch.ContainerDefinition{{Name: "main", Driver: "exec", Command: []string{"sleep", "1000"}}},
			Ports:      []*pborch.PortMapping{{Name: "http", ContainerPort: 80, HostPort: 8080}}}
	}
	store(t, api, core.NamespaceID("team-b"), &pbcore.Namespace{})
	store(t, api, orchestrator.TaskDefinitionID("default", "web", 1), web("web"))
	store(t, api, orchestrator.TaskDefinitionID("team-b", "api", 1), web("api"))
	holder := store(t, api, orchestrator.TaskID("team-b", "01jholder"), &pborch.Task{TaskDefinition: "api:1", Instance: "i1", DesiredStatus: orchestrator.StatusRunning})
	report(t, api, holder, &pborch.TaskStatus{LastStatus: orchestrator.StatusRunning})

	if _, err := runCLI(addr, "run", "--taskdef", "web:1", "--instance", "i1"); err == nil ||
		err.Error() != "instance i1 cannot run web:1: host port 8080/tcp is taken by task team-b/01jholder" {
		t.Fatalf("task run beside a holder of 8080: %v", err)
	}
	if _, err := runCLI(addr, "run", "--taskdef", "web:1", "--instance", "i2"); err == nil ||
		err.Error() != "instance i2 cannot run web:1: the task definition's network is bridge, and the instance cannot run bridge tasks (network.bridge=false)" {
		t.Fatalf("task run on an instance without bridge: %v", err)
	}
	list, _ := api.List(context.Background(), &pbresource.ListRequest{Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
	if n := len(list.GetResources()); n != 0 {
		t.Fatalf("%d tasks written by refused runs", n)
	}

	// The holder stops: 8080 is free.
	report(t, api, holder, &pborch.TaskStatus{LastStatus: orchestrator.StatusStopped})
	out, err := runCLI(addr, "run", "--taskdef", "web:1", "--instance", "i1")
	if err != nil || !strings.Contains(out, "of web:1 placed on i1") {
		t.Fatalf("task run once 8080 is free: %q, %v", out, err)
	}
}

// taskdef show shows the network and the ports published; task show the
// network as the agent reports it.
func TestNetworkShown(t *testing.T) {
	api, addr := testServer(t)
	td := &pborch.TaskDefinition{Family: "web", Revision: 1, Network: "bridge",
		Containers: []*pborch.ContainerDefinition{{Name: "app", Driver: "exec", Command: []string{"sleep", "1000"}}},
		Ports: []*pborch.PortMapping{
			{Name: "http", ContainerPort: 8080, HostPort: 80},
			{Name: "metrics", ContainerPort: 9100},
			{Name: "dns", ContainerPort: 53, HostPort: 5353, Protocol: "udp"},
		}}
	store(t, api, orchestrator.TaskDefinitionID("default", "web", 1), td)
	out, err := runTrellis(addr, func(e *cli.Env) *cobra.Command { return newTaskDefCmd(e, testTypes()) }, "taskdef", "show", "web:1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Network: bridge (one network namespace for the task, shared by its containers)",
		"PORT      CONTAINER PORT   HOST PORT               PROTOCOL",
		"http      8080             80                      tcp",
		"metrics   9100             any (the agent picks)   tcp",
		"dns       53               5353                    udp",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("taskdef show lacks %q:\n%s", want, out)
		}
	}

	task := store(t, api, orchestrator.TaskID("default", "01jweb"), &pborch.Task{TaskDefinition: "web:1", Instance: "i1", DesiredStatus: orchestrator.StatusRunning})
	out, err = runCLI(addr, "show", "01jweb")
	if err != nil || strings.Contains(out, "Network") {
		t.Fatalf("task show before any report: %v\n%s", err, out)
	}
	report(t, api, task, &pborch.TaskStatus{LastStatus: orchestrator.StatusRunning, Network: &pborch.TaskNetwork{
		Mode: "bridge", NamespacePath: "/run/netns/trellis-0f8e", Address: "10.88.0.5",
		Ports: []*pborch.PortBinding{{Name: "http", ContainerPort: 8080, HostPort: 80, Protocol: "tcp"}, {Name: "metrics", ContainerPort: 9100, HostPort: 31022, Protocol: "tcp"}},
	}})
	out, err = runCLI(addr, "show", "01jweb")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Network:             bridge",
		"Network namespace:   /run/netns/trellis-0f8e",
		"Address:             10.88.0.5",
		"Published ports:     http 80/tcp -> 8080, metrics 31022/tcp -> 9100",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("task show lacks %q:\n%s", want, out)
		}
	}
}
