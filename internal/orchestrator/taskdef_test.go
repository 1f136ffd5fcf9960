package orchestrator_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// webDefinition is the example spec.
func webDefinition() *pborch.TaskDefinition {
	return &pborch.TaskDefinition{
		Family: "web", Revision: 1,
		Containers: []*pborch.ContainerDefinition{
			{
				Name: "app", Driver: "exec", Command: []string{"/usr/local/bin/web", "--port", "8080"},
				Env: map[string]string{"LOG_LEVEL": "info"}, Ports: []uint32{8080}, Essential: proto.Bool(true),
				DependsOn:   []*pborch.Dependency{{Container: "proxy", Condition: "HEALTHY"}},
				HealthCheck: &pborch.HealthCheck{Http: "http://127.0.0.1:8080/healthz", Interval: "5s", Timeout: "2s", Retries: 3, StartPeriod: "10s"},
			},
			{
				Name: "proxy", Driver: "exec", Command: []string{"/bin/sh", "-c", "exec sleep infinity"}, Sidecar: true,
			},
		},
		RestartPolicy: &pborch.RestartPolicy{Attempts: 3, Interval: "5m", Delay: "5s"},
	}
}

func taskDefResource(t *testing.T, td *pborch.TaskDefinition) *pbresource.Resource {
	t.Helper()
	data, err := anypb.New(td)
	if err != nil {
		t.Fatal(err)
	}
	return &pbresource.Resource{Id: orchestrator.TaskDefinitionID("default", td.GetFamily(), td.GetRevision()), Data: data}
}

func TestTaskDefinitionValid(t *testing.T) {
	res := taskDefResource(t, webDefinition())
	if err := orchestrator.MutateTaskDefinition(res); err != nil {
		t.Fatal(err)
	}
	if err := orchestrator.ValidateTaskDefinition(res); err != nil {
		t.Fatalf("the issue's example is refused: %v", err)
	}
}

func TestTaskDefinitionDefaults(t *testing.T) {
	td := webDefinition()
	td.Containers[1].Essential = nil
	td.Containers[0].DependsOn[0].Condition = ""
	res := taskDefResource(t, td)
	if err := orchestrator.MutateTaskDefinition(res); err != nil {
		t.Fatal(err)
	}
	var got pborch.TaskDefinition
	if err := res.GetData().UnmarshalTo(&got); err != nil {
		t.Fatal(err)
	}
	if !got.Containers[1].GetEssential() || got.Containers[0].DependsOn[0].GetCondition() != "START" {
		t.Fatalf("defaults not applied: %v", &got)
	}
}

func TestTaskDefinitionRefusals(t *testing.T) {
	cases := []struct {
		name string
		edit func(td *pborch.TaskDefinition)
		want string
	}{
		{"cycle", func(td *pborch.TaskDefinition) {
			td.Containers[1].DependsOn = []*pborch.Dependency{{Container: "app", Condition: "START"}}
		}, "data.containers: depends_on has a cycle: app -> proxy -> app"},
		{"self dependency", func(td *pborch.TaskDefinition) {
			td.Containers[1].DependsOn = []*pborch.Dependency{{Container: "proxy", Condition: "START"}}
		}, `data.containers[1].depends_on[0].container: container "proxy" cannot depend on itself`},
		{"unknown dependency", func(td *pborch.TaskDefinition) { td.Containers[0].DependsOn[0].Container = "db" },
			`data.containers[0].depends_on[0].container: "db" is not a container of this task`},
		{"bad condition", func(td *pborch.TaskDefinition) { td.Containers[0].DependsOn[0].Condition = "READY" },
			`data.containers[0].depends_on[0].condition: "READY" is not a condition`},
		{"unknown driver", func(td *pborch.TaskDefinition) { td.Containers[0].Driver = "rkt" },
			`data.containers[0].driver: "rkt" is not a driver: one of exec, docker`},
		{"no driver", func(td *pborch.TaskDefinition) { td.Containers[0].Driver = "" },
			`data.containers[0].driver: is required`},
		{"missing image", func(td *pborch.TaskDefinition) { td.Containers[0].Driver = "docker"; td.Containers[0].Command = nil },
			`data.containers[0].image: is required by the docker driver`},
		{"exec without command", func(td *pborch.TaskDefinition) { td.Containers[1].Command = nil },
			`data.containers[1].command: is required by the exec driver`},
		{"port clash", func(td *pborch.TaskDefinition) { td.Containers[1].Ports = []uint32{9000, 8080} },
			`data.containers[1].ports[1]: port 8080 clashes with container "app"`},
		{"port zero", func(td *pborch.TaskDefinition) { td.Containers[1].Ports = []uint32{0} },
			`data.containers[1].ports[0]: 0 is not a port`},
		{"two kinds of check", func(td *pborch.TaskDefinition) { td.Containers[0].HealthCheck.Tcp = "127.0.0.1:8080" },
			`data.containers[0].health_check: needs exactly one of command, http or tcp (got 2)`},
		{"no kind of check", func(td *pborch.TaskDefinition) { td.Containers[0].HealthCheck.Http = "" },
			`data.containers[0].health_check: needs exactly one of command, http or tcp (got 0)`},
		{"bad url", func(td *pborch.TaskDefinition) { td.Containers[0].HealthCheck.Http = "ftp://x/" },
			`data.containers[0].health_check.http: "ftp://x/" is not an http:// or https:// URL`},
		{"bad tcp", func(td *pborch.TaskDefinition) { td.Containers[1].HealthCheck = &pborch.HealthCheck{Tcp: "21000"} },
			`data.containers[1].health_check.tcp: "21000" is not host:port`},
		{"bad interval", func(td *pborch.TaskDefinition) { td.Containers[0].HealthCheck.Interval = "often" },
			`data.containers[0].health_check.interval: "often" is not a duration`},
		{"timeout over interval", func(td *pborch.TaskDefinition) { td.Containers[0].HealthCheck.Timeout = "10s" },
			`data.containers[0].health_check.timeout: 10s is longer than the interval 5s`},
		{"negative retries", func(td *pborch.TaskDefinition) { td.Containers[0].HealthCheck.Retries = -1 },
			`data.containers[0].health_check.retries: -1 is not 0 to 100`},
		{"duplicate name", func(td *pborch.TaskDefinition) { td.Containers[1].Name = "app" },
			`data.containers[1].name: "app" is also the name of containers[0]`},
		{"bad name", func(td *pborch.TaskDefinition) { td.Containers[1].Name = "Proxy" },
			`data.containers[1].name: "Proxy" is not a valid name`},
		{"no containers", func(td *pborch.TaskDefinition) { td.Containers = nil },
			`data.containers: a task needs at least one container`},
		{"none essential", func(td *pborch.TaskDefinition) {
			td.Containers[0].Essential = proto.Bool(false)
			td.Containers[1].Essential = proto.Bool(false)
		}, `data.containers: at least one container must be essential`},
		{"bad stop timeout", func(td *pborch.TaskDefinition) { td.Containers[0].StopTimeout = "-1s" },
			`data.containers[0].stop_timeout: "-1s" must be positive`},
		{"tiny memory", func(td *pborch.TaskDefinition) {
			td.Containers[0].Resources = &pborch.Resources{MemoryBytes: 1000}
		}, `data.containers[0].resources.memory_bytes: 1000 is below the minimum of 4 MiB`},
		{"bad restart delay", func(td *pborch.TaskDefinition) { td.RestartPolicy.Delay = "soon" },
			`data.restart_policy.delay: "soon" is not a duration`},
		{"bad family", func(td *pborch.TaskDefinition) { td.Family = "Web" },
			`data.family: "Web" is not a valid name`},
		{"revision zero", func(td *pborch.TaskDefinition) { td.Revision = 0 },
			`data.revision: must be 1 or more (got 0)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			td := webDefinition()
			res := taskDefResource(t, td)
			c.edit(td)
			data, _ := anypb.New(td)
			res.Data = data
			if err := orchestrator.MutateTaskDefinition(res); err != nil {
				t.Fatal(err)
			}
			err := orchestrator.ValidateTaskDefinition(res)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant an error containing %q", err, c.want)
			}
		})
	}
}

func TestTaskDefinitionNameMustMatch(t *testing.T) {
	res := taskDefResource(t, webDefinition())
	res.Id.Name = "web-2"
	err := orchestrator.ValidateTaskDefinition(res)
	if err == nil || !strings.Contains(err.Error(), `id.name: "web-2" does not match the definition: web:1 is stored as "web-1"`) {
		t.Fatalf("got %v", err)
	}
}

func TestTaskDefinitionRefs(t *testing.T) {
	for _, c := range []struct {
		ref    string
		family string
		rev    int64
		bad    bool
	}{
		{"web:3", "web", 3, false},
		{"web", "web", 0, false},
		{"web-3:12", "web-3", 12, false},
		{"web:0", "", 0, true},
		{"web:x", "", 0, true},
		{"Web:1", "", 0, true},
		{":1", "", 0, true},
	} {
		f, r, err := orchestrator.ParseTaskDefinitionRef(c.ref)
		if (err != nil) != c.bad || f != c.family || r != c.rev {
			t.Errorf("ParseTaskDefinitionRef(%q) = %q, %d, %v", c.ref, f, r, err)
		}
		if !c.bad && r > 0 {
			name := orchestrator.TaskDefinitionName(f, r)
			if f2, r2, ok := orchestrator.ParseTaskDefinitionName(name); !ok || f2 != f || r2 != r {
				t.Errorf("name %q parses back as %q, %d, %v", name, f2, r2, ok)
			}
		}
	}
}
