package taskrunner

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/agent"
	"trellis.dev/trellis/internal/agent/health"
	"trellis.dev/trellis/internal/agent/lifecycle"
	"trellis.dev/trellis/internal/driver"
)

// meshRunnerConfig is a bridge mesh task of two app containers, one of
// which ignores SIGTERM (its stop timeout is 10 s), under a real data dir.
func meshRunnerConfig(t *testing.T) (agent.RunnerConfig, string) {
	top := t.TempDir()
	// t.TempDir's own directories are private; the data dir's parents
	// must be searchable by the proxy's user.
	for d := top; d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(top, "data")
	dir := filepath.Join(data, "tasks", "UID")
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	td := &pborch.TaskDefinition{
		Family: "web", Revision: 1, Network: "bridge",
		Containers: []*pborch.ContainerDefinition{
			{Name: "app", Driver: "exec", Command: []string{"/bin/web"}, Essential: proto.Bool(true)},
			{Name: "worker", Driver: "exec", Command: []string{"/bin/worker"}, Essential: proto.Bool(false), StopTimeout: "10s"},
		},
		Mesh: &pborch.TaskMesh{Service: "web", Port: 8080, Transparent: true},
	}
	return agent.RunnerConfig{
		TaskID: "default/t1", Namespace: "default", Name: "t1", UID: "UID", Definition: td,
		Dir: dir, LogDir: filepath.Join(dir, "logs"), Netns: "/run/netns/t1",
	}, data
}

func TestWithProxyInjects(t *testing.T) {
	rc, data := meshRunnerConfig(t)
	tr, err := WithProxy("/bin/true", data)(rc)
	if err != nil {
		t.Fatal(err)
	}
	spec := tr.(*runner).spec
	var names []string
	for _, c := range spec.Containers {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, []string{"app", "worker", "trellis-proxy"}) {
		t.Fatalf("containers %q", names)
	}
	p := spec.Containers[2]
	if p.Spec.User != 1337 || p.Spec.Group != 1337 || !p.Sidecar || !p.Essential || p.Driver != "exec" {
		t.Errorf("proxy: user %d:%d sidecar %v essential %v driver %s", p.Spec.User, p.Spec.Group, p.Sidecar, p.Essential, p.Driver)
	}
	if p.Spec.Netns != "/run/netns/t1" || p.Spec.LogDir != rc.LogDir || p.Spec.WorkingDir != "/" {
		t.Errorf("proxy: netns %q logs %q working dir %q", p.Spec.Netns, p.Spec.LogDir, p.Spec.WorkingDir)
	}
	if want := []string{"/bin/true", "proxy", "-socket", filepath.Join(rc.Dir, "proxy.sock"), "-task", "t1"}; !slices.Equal(p.Spec.Command[:6], want) {
		t.Errorf("proxy command %q, want it to begin %q", p.Spec.Command, want)
	}
	if p.Health == nil || p.Health.HTTP != "http://127.0.0.1:19000/ready" {
		t.Errorf("proxy health %+v", p.Health)
	}
	for _, c := range spec.Containers[:2] {
		if c.Spec.User != 0 || !slices.Contains(c.DependsOn, lifecycle.Dependency{Container: "trellis-proxy", Condition: lifecycle.CondHealthy}) {
			t.Errorf("%s: user %d, depends on %+v", c.Name, c.Spec.User, c.DependsOn)
		}
	}
	// The proxy's user can reach its socket's directory.
	for _, d := range []string{data, filepath.Join(data, "tasks"), rc.Dir} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o001 == 0 {
			t.Errorf("%s is not searchable: %v %v", d, fi.Mode(), err)
		}
	}
}

func TestWithProxyLeavesOtherTasks(t *testing.T) {
	rc, data := meshRunnerConfig(t)
	rc.Definition = proto.CloneOf(rc.Definition)
	rc.Definition.Mesh = nil
	tr, err := WithProxy("/bin/true", data)(rc)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tr.(*runner).spec.Containers); n != 2 {
		t.Errorf("%d containers, want the definition's 2", n)
	}
	if fi, _ := os.Stat(data); fi.Mode().Perm() != 0o700 {
		t.Errorf("the data dir's mode changed to %v for a task without a proxy", fi.Mode().Perm())
	}
}

func TestWithProxyRefuses(t *testing.T) {
	rc, data := meshRunnerConfig(t)
	rc.Definition = proto.CloneOf(rc.Definition)
	rc.Definition.Network = "host"
	_, err := WithProxy("/bin/true", data)(rc)
	if err == nil || !strings.Contains(err.Error(), `data.mesh.transparent: needs network "bridge"`) {
		t.Fatalf("WithProxy of a transparent host task: %v", err)
	}
}

// TestInjectedTimeline plays the injected spec through the lifecycle's
// Step: the proxy starts first and the apps only once it is healthy; on
// stop the apps get SIGTERM and the proxy its drain signal, and the proxy
// SIGTERM only once both have exited, the one ignoring SIGTERM after its
// stop timeout's SIGKILL.
func TestInjectedTimeline(t *testing.T) {
	rc, data := meshRunnerConfig(t)
	tr, err := WithProxy("/bin/true", data)(rc)
	if err != nil {
		t.Fatal(err)
	}
	spec := tr.(*runner).spec
	st, err := lifecycle.NewState(spec)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	step := func(ev lifecycle.Event) []string {
		t.Helper()
		d := lifecycle.Step(spec, st, ev, lifecycle.Env{Now: now})
		st = d.State
		var out []string
		for _, a := range d.Actions {
			out = append(out, a.String())
		}
		slices.Sort(out)
		return out
	}
	expect := func(what string, got []string, want ...string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Fatalf("%s: actions %q, want %q", what, got, want)
		}
	}
	handle := func(name string) driver.Handle { return driver.Handle{Driver: "exec", ID: name} }
	started := func(name string) lifecycle.Event {
		return lifecycle.Started{Container: name, Incarnation: 1, Handle: handle(name)}
	}

	expect("first tick", step(lifecycle.Tick{}), "start trellis-proxy")
	expect("proxy started", step(started("trellis-proxy")))
	now = now.Add(time.Second)
	expect("proxy healthy", step(lifecycle.Probed{Container: "trellis-proxy", Incarnation: 1, Result: health.Result{Pass: true}}),
		"start app", "start worker")
	expect("app started", step(started("app")))
	expect("worker started", step(started("worker")))
	if st.Status != lifecycle.TaskRunning {
		t.Fatalf("task %s, want RUNNING", st.Status)
	}

	now = now.Add(time.Minute)
	expect("stop", step(lifecycle.StopRequested{Reason: "deployment replaced"}),
		"signal app terminated", "signal trellis-proxy user defined signal 1", "signal worker terminated")
	now = now.Add(time.Second)
	expect("app exits", step(lifecycle.Exited{Container: "app", Incarnation: 1, Exit: driver.Exit{Code: 0}}))
	now = now.Add(9 * time.Second) // the worker's stop timeout
	expect("worker's timeout", step(lifecycle.Tick{}), "signal worker killed")
	expect("worker killed", step(lifecycle.Exited{Container: "worker", Incarnation: 1, Exit: driver.Exit{Code: -1, Signal: syscall.SIGKILL}}),
		"signal trellis-proxy terminated")
	expect("proxy exits", step(lifecycle.Exited{Container: "trellis-proxy", Incarnation: 1, Exit: driver.Exit{Code: 0}}),
		"destroy app", "destroy trellis-proxy", "destroy worker")
	if !st.Done() {
		t.Fatalf("task not done: %+v", st)
	}
}
