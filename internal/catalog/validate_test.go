package catalog_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

func TestServiceDefaultsAndValidation(t *testing.T) {
	w := newWorld(t)
	res, err := w.write(catalog.ServiceID("default", "web"), nil, &pbcatalog.Service{Ports: []*pbcatalog.ServicePort{{Name: "http", Port: 8080}}})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := resource.DecodeData[*pbcatalog.Service](res)
	if s.GetProtocol() != catalog.ProtocolTCP {
		t.Fatalf("protocol defaults to %q, want tcp", s.GetProtocol())
	}
	for _, tc := range []struct {
		name string
		svc  *pbcatalog.Service
		want string
	}{
		{"unknown protocol", &pbcatalog.Service{Protocol: "udp"}, `data.protocol: "udp" is not one of tcp, http, grpc`},
		{"port 0", &pbcatalog.Service{Ports: []*pbcatalog.ServicePort{{Name: "http"}}}, "data.ports[0].port: is 0, outside 1 to 65535"},
		{"port too high", &pbcatalog.Service{Ports: []*pbcatalog.ServicePort{{Name: "http", Port: 65536}}}, "data.ports[0].port: is 65536"},
		{"unnamed port", &pbcatalog.Service{Ports: []*pbcatalog.ServicePort{{Port: 80}}}, "data.ports[0].name: is required"},
		{"bad port name", &pbcatalog.Service{Ports: []*pbcatalog.ServicePort{{Name: "HTTP", Port: 80}}}, `data.ports[0].name: "HTTP" is not a valid name`},
		{"port named twice", &pbcatalog.Service{Ports: []*pbcatalog.ServicePort{{Name: "a", Port: 80}, {Name: "a", Port: 81}}}, `data.ports[1].name: "a" names a port already named`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := catalog.ServiceID("default", "refused")
			_, err := w.write(id, nil, tc.svc)
			requireRefused(t, err, tc.want)
			if !w.absent(id) {
				t.Fatal("a refused service was written")
			}
		})
	}
}

func requireRefused(t *testing.T, err error, want string) {
	t.Helper()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), want) {
		t.Fatalf("got %v, want InvalidArgument saying %q", err, want)
	}
}

// okInstance is a valid instance of task "t1" on instance "i-1".
func okInstance() *pbcatalog.ServiceInstance {
	return &pbcatalog.ServiceInstance{
		Service: "web", Address: "10.0.0.7", Port: 8080,
		Proxy:    &pbcatalog.Proxy{Port: 15000},
		Instance: "i-1", Task: "t1",
		Tags:   []string{"v1", "primary"},
		Meta:   map[string]string{"team": "payments"},
		Checks: []*pbcatalog.CheckDefinition{{Name: "t1/app"}, {Name: "t1"}},
	}
}

// okExternal is a valid instance registered from outside Trellis.
func okExternal() *pbcatalog.ServiceInstance {
	return &pbcatalog.ServiceInstance{
		Service: "db", Address: "db-1.example.com", Port: 5432,
		Checks: []*pbcatalog.CheckDefinition{{Name: "service:db", Ttl: durationpb.New(30 * time.Second)}},
	}
}

func TestServiceInstanceDefaults(t *testing.T) {
	w := newWorld(t)
	task := w.task("t1", "i-1")
	res, err := w.write(catalog.ServiceInstanceID("default", "t1"), task, okInstance())
	if err != nil {
		t.Fatal(err)
	}
	si, _ := resource.DecodeData[*pbcatalog.ServiceInstance](res)
	if si.GetProxy().GetMode() != catalog.ProxyModeLocal {
		t.Fatalf("proxy mode defaults to %q, want local", si.GetProxy().GetMode())
	}
	if _, err := w.write(catalog.ServiceInstanceID("default", "db-1"), nil, okExternal()); err != nil {
		t.Fatalf("an instance from outside: %v", err)
	}
	// Owned by its task: the owner reaper deletes it with the task.
	owned, err := w.api.ListByOwner(w.ctx, &pbresource.ListByOwnerRequest{Owner: task})
	if err != nil {
		t.Fatal(err)
	}
	if len(owned.GetResources()) != 1 || owned.GetResources()[0].GetId().GetName() != "t1" {
		t.Fatalf("the task owns %v, want its service instance", owned.GetResources())
	}
}

// Each refusal names its field, and writes nothing.
func TestServiceInstanceValidation(t *testing.T) {
	w := newWorld(t)
	task := w.task("t1", "i-1")
	other := w.task("t2", "i-1")
	with := func(edit func(*pbcatalog.ServiceInstance)) *pbcatalog.ServiceInstance {
		si := okInstance()
		edit(si)
		return si
	}
	external := func(edit func(*pbcatalog.ServiceInstance)) *pbcatalog.ServiceInstance {
		si := okExternal()
		edit(si)
		return si
	}
	manyTags := make([]string, catalog.MaxTags+1)
	for i := range manyTags {
		manyTags[i] = strings.Repeat("t", i+1)
	}
	manyMeta := map[string]string{}
	for i := range catalog.MaxMetaEntries + 1 {
		manyMeta[strings.Repeat("k", i+1)] = "v"
	}
	for _, tc := range []struct {
		name  string
		si    *pbcatalog.ServiceInstance
		owner *pbresource.ID
		want  string
	}{
		{"no service", with(func(si *pbcatalog.ServiceInstance) { si.Service = "" }), task, "data.service: is required"},
		{"bad service", with(func(si *pbcatalog.ServiceInstance) { si.Service = "Web_1" }), task, `data.service: "Web_1" is not a valid name`},
		{"no address", with(func(si *pbcatalog.ServiceInstance) { si.Address = "" }), task, "data.address: is required"},
		{"bad address", with(func(si *pbcatalog.ServiceInstance) { si.Address = "10.0.0.1:80" }), task, `data.address: "10.0.0.1:80" is neither an IP address nor a hostname`},
		{"digits alone", with(func(si *pbcatalog.ServiceInstance) { si.Address = "10.0.1" }), task, `data.address: "10.0.1" is neither`},
		{"address with a zone", with(func(si *pbcatalog.ServiceInstance) { si.Address = "fe80::1%eth0" }), task, "data.address: \"fe80::1%eth0\" has a zone"},
		{"label too long", with(func(si *pbcatalog.ServiceInstance) { si.Address = strings.Repeat("a", 64) + ".example.com" }), task, "data.address:"},
		{"port 0", with(func(si *pbcatalog.ServiceInstance) { si.Port = 0 }), task, "data.port: is 0, outside 1 to 65535"},
		{"port too high", with(func(si *pbcatalog.ServiceInstance) { si.Port = 70000 }), task, "data.port: is 70000"},
		{"proxy port 0", with(func(si *pbcatalog.ServiceInstance) { si.Proxy.Port = 0 }), task, "data.proxy.port: is 0"},
		{"proxy on the app's port", with(func(si *pbcatalog.ServiceInstance) { si.Proxy.Port = 8080 }), task, "data.proxy.port: is 8080, the instance's own port"},
		{"proxy mode", with(func(si *pbcatalog.ServiceInstance) { si.Proxy.Mode = "tproxy" }), task, `data.proxy.mode: "tproxy" is not local or transparent`},
		{"instance without task", with(func(si *pbcatalog.ServiceInstance) { si.Task = "" }), task, "data.task: is required with data.instance"},
		{"task without instance", with(func(si *pbcatalog.ServiceInstance) { si.Instance = "" }), task, "data.instance: is required with data.task"},
		{"bad instance", with(func(si *pbcatalog.ServiceInstance) { si.Instance = "I 1" }), task, `data.instance: "I 1" is not a valid name`},
		{"no owner", okInstance(), nil, "owner: is required: an instance of task t1 is owned by that task"},
		{"owned by another task", okInstance(), other, "owner: is orchestrator/v1/Task/default/t2"},
		{"too many tags", with(func(si *pbcatalog.ServiceInstance) { si.Tags = manyTags }), task, "data.tags: has 65 tags, over the limit of 64"},
		{"empty tag", with(func(si *pbcatalog.ServiceInstance) { si.Tags = []string{"a", ""} }), task, "data.tags[1]: is empty"},
		{"tag with a space", with(func(si *pbcatalog.ServiceInstance) { si.Tags = []string{"a b"} }), task, `data.tags[0]: "a b" holds a space`},
		{"long tag", with(func(si *pbcatalog.ServiceInstance) { si.Tags = []string{strings.Repeat("x", 256)} }), task, "data.tags[0]: is 256 bytes"},
		{"tag twice", with(func(si *pbcatalog.ServiceInstance) { si.Tags = []string{"v1", "v1"} }), task, `data.tags[1]: "v1" is given twice`},
		{"too much meta", with(func(si *pbcatalog.ServiceInstance) { si.Meta = manyMeta }), task, "data.meta: has 65 keys, over the limit of 64"},
		{"bad meta key", with(func(si *pbcatalog.ServiceInstance) { si.Meta = map[string]string{"a.b": "v"} }), task, `data.meta["a.b"]: is not a valid key`},
		{"long meta value", with(func(si *pbcatalog.ServiceInstance) { si.Meta = map[string]string{"k": strings.Repeat("v", 513)} }), task, `data.meta["k"]: is 513 bytes, over the limit of 512`},
		{"check of another task", with(func(si *pbcatalog.ServiceInstance) { si.Checks[0].Name = "t2/app" }), task, `data.checks[0].name: "t2/app" is not "t1" or "t1"/<container>`},
		{"check of a bad container", with(func(si *pbcatalog.ServiceInstance) { si.Checks[0].Name = "t1/App" }), task, `data.checks[0].name: "t1/App" is not`},
		{"check named twice", with(func(si *pbcatalog.ServiceInstance) { si.Checks[1].Name = "t1/app" }), task, `data.checks[1].name: "t1/app" names a check already defined`},
		{"check name with a space", with(func(si *pbcatalog.ServiceInstance) { si.Checks[0].Name = "t1 app" }), task, `data.checks[0].name: "t1 app" is not a valid check name`},
		{"TTL check of a task", with(func(si *pbcatalog.ServiceInstance) { si.Checks[0].Ttl = durationpb.New(time.Minute) }), task, "data.checks[0].ttl: is set"},
		{"external check without ttl", external(func(si *pbcatalog.ServiceInstance) { si.Checks[0].Ttl = nil }), nil, "data.checks[0].ttl: is required"},
		{"ttl too short", external(func(si *pbcatalog.ServiceInstance) { si.Checks[0].Ttl = durationpb.New(time.Millisecond) }), nil, "data.checks[0].ttl: is 1ms, outside 1s to 24h0m0s"},
		{"ttl too long", external(func(si *pbcatalog.ServiceInstance) { si.Checks[0].Ttl = durationpb.New(25 * time.Hour) }), nil, "data.checks[0].ttl: is 25h0m0s"},
		{"too many checks", external(func(si *pbcatalog.ServiceInstance) {
			for i := range catalog.MaxChecks {
				si.Checks = append(si.Checks, &pbcatalog.CheckDefinition{Name: "c" + strings.Repeat("x", i), Ttl: durationpb.New(time.Minute)})
			}
		}), nil, "data.checks: has 33 checks, over the limit of 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := catalog.ServiceInstanceID("default", "refused")
			_, err := w.write(id, tc.owner, tc.si)
			requireRefused(t, err, tc.want)
			if !w.absent(id) {
				t.Fatal("a refused instance was written")
			}
		})
	}
}

// An instance of a task is on the instance its task runs on: one that
// names another instance (whose agent would then write its checks), or a
// task that does not exist, is refused, and nothing is written.
func TestServiceInstanceAgreesWithItsTask(t *testing.T) {
	w := newWorld(t)
	task := w.task("t1", "i-1")
	id := catalog.ServiceInstanceID("default", "t1")
	elsewhere := okInstance()
	elsewhere.Instance = "i-2"
	_, err := w.write(id, task, elsewhere)
	requireRefused(t, err, `data.instance: is "i-2", but task t1 runs on instance "i-1"`)
	gone := proto.Clone(task).(*pbresource.ID)
	gone.Uid = "01J00000000000000000000000"
	_, err = w.write(id, gone, okInstance())
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("an instance of a task that does not exist: %v", err)
	}
	if !w.absent(id) {
		t.Fatal("a refused instance was written")
	}
	// In a batch that places the task too.
	taskData, _ := anypb.New(&pborch.Task{TaskDefinition: "web:1", Instance: "i-1", StartedBy: "test"})
	elsewhere.Task, elsewhere.Checks = "t2", []*pbcatalog.CheckDefinition{{Name: "t2"}}
	siData, _ := anypb.New(elsewhere)
	_, err = w.api.WriteBatch(w.ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{
		{Id: orchestrator.TaskID("default", "t2"), Data: taskData},
		{Id: catalog.ServiceInstanceID("default", "t2"), Owner: orchestrator.TaskID("default", "t2"), Data: siData},
	}})
	requireRefused(t, err, `resources[1].data.instance: is "i-2", but task t2 runs on instance "i-1"`)
	if !w.absent(orchestrator.TaskID("default", "t2")) {
		t.Fatal("a refused batch wrote its task")
	}
	if _, err := w.write(id, task, okInstance()); err != nil {
		t.Fatalf("an instance on its task's instance: %v", err)
	}
}

// Which service an instance is of, and where it runs, never change: the
// agent that writes its checks never moves.
func TestServiceInstanceUpdate(t *testing.T) {
	w := newWorld(t)
	task := w.task("t1", "i-1")
	id := catalog.ServiceInstanceID("default", "t1")
	if _, err := w.write(id, task, okInstance()); err != nil {
		t.Fatal(err)
	}
	moved := okInstance()
	moved.Address, moved.Tags = "10.0.0.8", []string{"v2"}
	if _, err := w.write(id, task, moved); err != nil {
		t.Fatalf("changing its address and tags: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*pbcatalog.ServiceInstance)
		want string
	}{
		{"service", func(si *pbcatalog.ServiceInstance) { si.Service = "api" }, `data.service: cannot change from "web" to "api"`},
		{"instance", func(si *pbcatalog.ServiceInstance) { si.Instance = "i-2" }, `data.instance: cannot change from "i-1" to "i-2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			si := proto.Clone(moved).(*pbcatalog.ServiceInstance)
			tc.edit(si)
			before := w.read(id).GetVersion()
			_, err := w.write(id, task, si)
			requireRefused(t, err, tc.want)
			if got := w.read(id).GetVersion(); got != before {
				t.Fatal("a refused update was written")
			}
		})
	}
}

func TestChecksStatusValidation(t *testing.T) {
	now := timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ok := func() *pbcatalog.ChecksStatus {
		return &pbcatalog.ChecksStatus{Checks: []*pbcatalog.CheckStatus{{Name: "t1/app", Status: catalog.CheckWarning}, {Name: "t1", Status: catalog.CheckPassing}}, Health: catalog.CheckWarning, ReportedAt: now}
	}
	if err := catalog.ValidateChecksStatus(ok()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*pbcatalog.ChecksStatus)
		want string
	}{
		{"unknown status", func(cs *pbcatalog.ChecksStatus) { cs.Checks[0].Status = "HEALTHY" }, `checks[0].status: "HEALTHY" is not one of passing, warning, critical`},
		{"no name", func(cs *pbcatalog.ChecksStatus) { cs.Checks[1].Name = "" }, "checks[1].name: is required"},
		{"twice", func(cs *pbcatalog.ChecksStatus) { cs.Checks[1].Name = "t1/app" }, `checks[1].name: "t1/app" is reported twice`},
		{"long output", func(cs *pbcatalog.ChecksStatus) { cs.Checks[0].Output = strings.Repeat("o", 4097) }, "checks[0].output: is 4097 bytes"},
		{"a health that lies", func(cs *pbcatalog.ChecksStatus) { cs.Health = catalog.CheckPassing }, `health: is "passing"; the aggregate of the checks is "warning"`},
		{"no time", func(cs *pbcatalog.ChecksStatus) { cs.ReportedAt = nil }, "reported_at: is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := ok()
			tc.edit(cs)
			err := catalog.ValidateChecksStatus(cs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// Over the service: the payload's refusal is named under status.data, and
// nothing is written.
func TestChecksStatusRefusedWritesNothing(t *testing.T) {
	w := newWorld(t)
	task := w.task("t1", "i-1")
	id := catalog.ServiceInstanceID("default", "t1")
	if _, err := w.write(id, task, okInstance()); err != nil {
		t.Fatal(err)
	}
	bad := &pbcatalog.ChecksStatus{Checks: []*pbcatalog.CheckStatus{{Name: "t1", Status: "up"}}, Health: catalog.CheckCritical, ReportedAt: timestamppb.Now()}
	err := w.writeChecks(resource.AsAgent(w.ctx, "i-1"), id, catalog.AgentChecksStatusKey, bad)
	requireRefused(t, err, `status.data.checks[0].status: "up" is not one of`)
	if st := w.read(id).GetStatus(); len(st) != 0 {
		t.Fatalf("a refused status was written: %v", st)
	}
}
