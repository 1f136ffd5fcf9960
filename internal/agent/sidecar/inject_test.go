package sidecar_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/agent/sidecar"
	"trellis.dev/trellis/internal/driver"
)

var cfg = sidecar.Config{Executable: "/usr/local/bin/trellis", TaskDir: "/var/lib/trellis/tasks/u1", Task: "web-1"}

func def(mesh *pborch.TaskMesh, network string, names ...string) *pborch.TaskDefinition {
	td := &pborch.TaskDefinition{Family: "web", Revision: 1, Network: network, Mesh: mesh}
	for _, n := range names {
		td.Containers = append(td.Containers, &pborch.ContainerDefinition{Name: n, Driver: "exec", Command: []string{"/bin/" + n}})
	}
	return td
}

func wantProxy() *pborch.ContainerDefinition {
	return &pborch.ContainerDefinition{
		Name:   "trellis-proxy",
		Driver: "exec",
		Command: []string{"/usr/local/bin/trellis", "proxy",
			"-socket", "/var/lib/trellis/tasks/u1/proxy.sock",
			"-task", "web-1"},
		WorkingDir: "/",
		Essential:  proto.Bool(true),
		Sidecar:    true,
		HealthCheck: &pborch.HealthCheck{
			Http: "http://127.0.0.1:19000/ready", Interval: "10s", Timeout: "2s", Retries: 3, StartPeriod: "60s",
		},
	}
}

func TestInject(t *testing.T) {
	healthy := &pborch.Dependency{Container: "trellis-proxy", Condition: "HEALTHY"}
	for _, tc := range []struct {
		name string
		in   *pborch.TaskDefinition
		want *pborch.TaskDefinition
	}{
		{
			name: "no mesh block: unchanged",
			in:   def(nil, "bridge", "app"),
			want: def(nil, "bridge", "app"),
		},
		{
			name: "bridge mesh task: the proxy, and the app waits for it",
			in:   def(&pborch.TaskMesh{Port: 8080, Transparent: true}, "bridge", "app"),
			want: func() *pborch.TaskDefinition {
				td := def(&pborch.TaskMesh{Port: 8080, Transparent: true}, "bridge", "app")
				td.Containers[0].DependsOn = []*pborch.Dependency{healthy}
				td.Containers = append(td.Containers, wantProxy())
				return td
			}(),
		},
		{
			name: "host mesh task: no proxy (its ports would be the instance's)",
			in:   def(&pborch.TaskMesh{Port: 8080}, "", "app"),
			want: def(&pborch.TaskMesh{Port: 8080}, "", "app"),
		},
		{
			name: "host mesh task, network named",
			in:   def(&pborch.TaskMesh{Port: 8080}, "host", "app"),
			want: def(&pborch.TaskMesh{Port: 8080}, "host", "app"),
		},
		{
			name: "every container waits, after its own dependencies",
			in: func() *pborch.TaskDefinition {
				td := def(&pborch.TaskMesh{Port: 8080}, "bridge", "init", "app")
				td.Containers[1].DependsOn = []*pborch.Dependency{{Container: "init", Condition: "SUCCESS"}}
				return td
			}(),
			want: func() *pborch.TaskDefinition {
				td := def(&pborch.TaskMesh{Port: 8080}, "bridge", "init", "app")
				td.Containers[0].DependsOn = []*pborch.Dependency{healthy}
				td.Containers[1].DependsOn = []*pborch.Dependency{{Container: "init", Condition: "SUCCESS"}, healthy}
				td.Containers = append(td.Containers, wantProxy())
				return td
			}(),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := proto.Clone(tc.in)
			got, err := sidecar.Inject(tc.in, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(tc.want, got) {
				t.Errorf("Inject =\n%s\nwant\n%s", prototext.Format(got), prototext.Format(tc.want))
			}
			if !proto.Equal(before, tc.in) {
				t.Error("Inject modified its input")
			}
		})
	}
}

func TestInjectRefuses(t *testing.T) {
	mesh := &pborch.TaskMesh{Port: 8080}
	for _, tc := range []struct {
		name string
		td   *pborch.TaskDefinition
		cfg  sidecar.Config
		want string
	}{
		{"a container already named trellis-proxy", def(mesh, "bridge", "app", "trellis-proxy"), cfg,
			`data.containers[1].name: "trellis-proxy" is the name of the sidecar proxy`},
		{"transparent in host network mode", def(&pborch.TaskMesh{Port: 8080, Transparent: true}, "host", "app"), cfg,
			`data.mesh.transparent: needs network "bridge"`},
		{"transparent in the default network mode", def(&pborch.TaskMesh{Port: 8080, Transparent: true}, "", "app"), cfg,
			`data.mesh.transparent: needs network "bridge"`},
		{"no executable", def(mesh, "bridge", "app"), sidecar.Config{TaskDir: cfg.TaskDir, Task: cfg.Task},
			"the agent does not know its own executable"},
		{"a relative executable", def(mesh, "bridge", "app"), sidecar.Config{Executable: "trellis", TaskDir: cfg.TaskDir, Task: cfg.Task},
			`executable "trellis" is not an absolute path`},
		{"a relative task dir", def(mesh, "bridge", "app"), sidecar.Config{Executable: cfg.Executable, TaskDir: "tasks/u1", Task: cfg.Task},
			`task directory "tasks/u1" is not an absolute path`},
		{"no task name", def(mesh, "bridge", "app"), sidecar.Config{Executable: cfg.Executable, TaskDir: cfg.TaskDir},
			"the task has no name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sidecar.Inject(tc.td, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Inject = %v, %v; want an error with %q", got, err, tc.want)
			}
			if got != nil {
				t.Errorf("Inject returned a definition with its error")
			}
		})
	}
	// A container named trellis-proxy is the author's own when there is
	// no mesh block: nothing is injected, nothing refused.
	td := def(nil, "bridge", "trellis-proxy")
	if got, err := sidecar.Inject(td, cfg); err != nil || got != td {
		t.Errorf("Inject without a mesh block = %v, %v", got, err)
	}
}

func TestDriverSpec(t *testing.T) {
	base := func(ct *pborch.ContainerDefinition) driver.Spec { return driver.Spec{Container: ct.GetName()} }
	f := sidecar.DriverSpec(base)
	if s := f(&pborch.ContainerDefinition{Name: "trellis-proxy"}); s.User != 1337 || s.Group != 1337 || s.Container != "trellis-proxy" {
		t.Errorf("the proxy's spec: %+v", s)
	}
	if s := f(&pborch.ContainerDefinition{Name: "app"}); s.User != 0 || s.Group != 0 {
		t.Errorf("the app's spec: %+v", s)
	}
}
