package docker

import (
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/go-connections/nat"

	"trellis.dev/trellis/internal/driver"
)

// dockerName is what the engine accepts as a container name.
var dockerName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

func TestContainerName(t *testing.T) {
	for _, tc := range []struct {
		task, uid, container string
		prefix               string
	}{
		{"default/web", "01J0ABC", "app", "trellis-default_web-app-"},
		{"ns/name with spaces", "u", "side car", "trellis-ns_name_with_spaces-side_car-"},
		{"", "", "", "trellis-_-_-"},
		{"ns/" + strings.Repeat("long", 30), "u", "c", "trellis-ns_" + strings.Repeat("long", 30)[:37] + "-c-"},
		{"ns/ünïcode", "u", "app", "trellis-ns__n_code-app-"},
	} {
		got := containerName(tc.task, tc.uid, tc.container)
		if !strings.HasPrefix(got, tc.prefix) || !dockerName.MatchString(got) || len(got) != len(tc.prefix)+10 {
			t.Errorf("containerName(%q, %q, %q) = %q, want %q + 10 hex digits", tc.task, tc.uid, tc.container, got, tc.prefix)
		}
	}
	// Distinct identities never share a name, even when they clean alike.
	names := map[string]string{}
	for _, id := range [][3]string{
		{"ns/web", "u1", "app"}, {"ns/web", "u2", "app"}, {"ns/web", "u1", "proxy"},
		{"ns_web", "u1", "app"}, {"ns/web", "u1", "ap p"}, {"ns/web", "u1", "ap_p"},
	} {
		name := containerName(id[0], id[1], id[2])
		if prev, ok := names[name]; ok {
			t.Errorf("%v and %s share the name %s", id, prev, name)
		}
		names[name] = strings.Join(id[:], ",")
	}
	if first, again := containerName("a", "b", "c"), containerName("a", "b", "c"); first != again {
		t.Error("containerName is not deterministic")
	}
}

func validSpec() driver.Spec {
	return driver.Spec{TaskID: "ns/web", TaskUID: "u1", Container: "app", Image: "web:1"}
}

func TestCreateConfig(t *testing.T) {
	spec := validSpec()
	spec.Command = []string{"/bin/web", "--port", "8080"}
	spec.Env = map[string]string{"B": "2", "A": "1=one", "EMPTY": ""}
	spec.WorkingDir = "/srv"
	spec.Ports = []int{8080, 9090}
	spec.CPUMillis = 250
	spec.MemoryBytes = 128 << 20

	cfg, host, err := createConfig(spec, ownerOf(Config{Cluster: "c1", AgentID: "id1", Labels: map[string]string{"trellis.dev_run": "/tmp/trellis-dev-1"}}, "agent-1"), "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Image != "web:1" || cfg.WorkingDir != "/srv" {
		t.Errorf("image %q, working dir %q", cfg.Image, cfg.WorkingDir)
	}
	if !slices.Equal(cfg.Entrypoint, []string{"/bin/web"}) || !slices.Equal(cfg.Cmd, []string{"--port", "8080"}) {
		t.Errorf("entrypoint %q, cmd %q", cfg.Entrypoint, cfg.Cmd)
	}
	if !slices.Equal(cfg.Env, []string{"A=1=one", "B=2", "EMPTY="}) {
		t.Errorf("env %q", cfg.Env)
	}
	wantLabels := map[string]string{LabelTask: "ns/web", LabelTaskUID: "u1", LabelContainer: "app", LabelAgent: "agent-1",
		LabelCluster: "c1", LabelAgentID: "id1", "trellis.dev_run": "/tmp/trellis-dev-1"}
	if len(cfg.Labels) != len(wantLabels) {
		t.Errorf("labels %v", cfg.Labels)
	}
	for k, v := range wantLabels {
		if cfg.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cfg.Labels[k], v)
		}
	}
	for _, p := range []nat.Port{"8080/tcp", "9090/tcp"} {
		if _, ok := cfg.ExposedPorts[p]; !ok {
			t.Errorf("port %s not exposed", p)
		}
		b := host.PortBindings[p]
		if len(b) != 1 || b[0].HostPort != p.Port() || b[0].HostIP != "" {
			t.Errorf("port %s bound to %v, want the same host port on all addresses", p, b)
		}
	}
	if host.Resources.NanoCPUs != 250_000_000 || host.Resources.Memory != 128<<20 || host.Resources.MemorySwap != 128<<20 {
		t.Errorf("resources %+v", host.Resources)
	}
	if host.RestartPolicy.Name != container.RestartPolicyDisabled || host.AutoRemove {
		t.Errorf("restart policy %+v, auto remove %v", host.RestartPolicy, host.AutoRemove)
	}
	if host.NetworkMode != "" || !slices.Equal(host.ExtraHosts, []string{hostGateway}) {
		t.Errorf("network %q, extra hosts %q", host.NetworkMode, host.ExtraHosts)
	}
	if host.LogConfig.Type != "json-file" || host.LogConfig.Config["max-size"] == "" || host.LogConfig.Config["max-file"] == "" {
		t.Errorf("log config %+v", host.LogConfig)
	}
}

func TestCreateConfigDefaults(t *testing.T) {
	cfg, host, err := createConfig(validSpec(), owner{agent: "a"}, "")
	if err != nil {
		t.Fatal(err)
	}
	// No command: the image's entrypoint and cmd stay.
	if cfg.Entrypoint != nil || cfg.Cmd != nil || cfg.Env != nil || cfg.ExposedPorts != nil {
		t.Errorf("entrypoint %q, cmd %q, env %q, ports %v", cfg.Entrypoint, cfg.Cmd, cfg.Env, cfg.ExposedPorts)
	}
	// No limits.
	if host.Resources.Memory != 0 || host.Resources.MemorySwap != 0 || host.Resources.NanoCPUs != 0 || host.PortBindings != nil {
		t.Errorf("resources %+v, bindings %v", host.Resources, host.PortBindings)
	}

	// A one-word command replaces the entrypoint and leaves cmd empty
	// (not nil, which the engine would fill from the image).
	spec := validSpec()
	spec.Command = []string{"/bin/web"}
	cfg, _, err = createConfig(spec, owner{agent: "a"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Entrypoint, []string{"/bin/web"}) || cfg.Cmd == nil || len(cfg.Cmd) != 0 {
		t.Errorf("entrypoint %q, cmd %#v", cfg.Entrypoint, cfg.Cmd)
	}
}

func TestCreateConfigNetworks(t *testing.T) {
	spec := validSpec()
	spec.Ports = []int{8080}
	_, host, err := createConfig(spec, owner{agent: "a"}, "host")
	if err != nil {
		t.Fatal(err)
	}
	if host.NetworkMode != "host" || host.PortBindings != nil || host.ExtraHosts != nil {
		t.Errorf("host network: mode %q, bindings %v, extra hosts %v", host.NetworkMode, host.PortBindings, host.ExtraHosts)
	}
	_, host, err = createConfig(spec, owner{agent: "a"}, "mesh")
	if err != nil {
		t.Fatal(err)
	}
	if host.NetworkMode != "mesh" || len(host.PortBindings) != 1 {
		t.Errorf("named network: mode %q, bindings %v", host.NetworkMode, host.PortBindings)
	}
}

func TestCreateConfigRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*driver.Spec)
		want   string
	}{
		{"no image", func(s *driver.Spec) { s.Image = "" }, "spec.Image: empty"},
		{"image with space", func(s *driver.Spec) { s.Image = "web 1" }, "spec.Image"},
		{"no task", func(s *driver.Spec) { s.TaskID = "" }, "spec.TaskID: empty"},
		{"no uid", func(s *driver.Spec) { s.TaskUID = "" }, "spec.TaskUID: empty"},
		{"no container", func(s *driver.Spec) { s.Container = "" }, "spec.Container: empty"},
		{"empty program", func(s *driver.Spec) { s.Command = []string{"", "x"} }, "spec.Command[0]"},
		{"env name with =", func(s *driver.Spec) { s.Env = map[string]string{"A=B": "c"} }, `spec.Env["A=B"]`},
		{"empty env name", func(s *driver.Spec) { s.Env = map[string]string{"": "c"} }, `spec.Env[""]`},
		{"relative working dir", func(s *driver.Spec) { s.WorkingDir = "srv" }, "spec.WorkingDir"},
		{"port zero", func(s *driver.Spec) { s.Ports = []int{0} }, "spec.Ports[0]"},
		{"port too big", func(s *driver.Spec) { s.Ports = []int{80, 70000} }, "spec.Ports[1]"},
		{"port twice", func(s *driver.Spec) { s.Ports = []int{80, 80} }, "spec.Ports[1]: port 80 listed twice"},
		{"negative cpu", func(s *driver.Spec) { s.CPUMillis = -1 }, "spec.CPUMillis"},
		{"negative memory", func(s *driver.Spec) { s.MemoryBytes = -1 }, "spec.MemoryBytes"},
		{"tiny memory", func(s *driver.Spec) { s.MemoryBytes = 1 << 20 }, "spec.MemoryBytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := validSpec()
			tc.change(&spec)
			_, _, err := createConfig(spec, owner{agent: "a"}, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("createConfig: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestExitOf(t *testing.T) {
	for _, tc := range []struct {
		code   int
		oom    bool
		signal syscall.Signal
	}{
		{0, false, 0},
		{1, false, 0},
		{128, false, 0},
		{130, false, syscall.SIGINT},
		{137, true, syscall.SIGKILL},
		{143, false, syscall.SIGTERM},
		{159, false, syscall.Signal(31)},
		{160, false, 0},
		{255, false, 0},
		{1, true, 0}, // the OOM killer took a child; the main process chose 1
	} {
		e := exitOf(tc.code, tc.oom)
		if e.Code != tc.code || e.OOMKilled != tc.oom || e.Signal != tc.signal || e.Err != nil {
			t.Errorf("exitOf(%d, %v) = %+v, want signal %d", tc.code, tc.oom, e, tc.signal)
		}
	}
}

func TestSignalName(t *testing.T) {
	for sig, want := range map[syscall.Signal]string{
		syscall.SIGTERM: "SIGTERM", syscall.SIGKILL: "SIGKILL", syscall.SIGUSR1: "SIGUSR1", 77: "77",
	} {
		if got := signalName(sig); got != want {
			t.Errorf("signalName(%d) = %q, want %q", sig, got, want)
		}
	}
}

func TestFingerprintOf(t *testing.T) {
	for _, tc := range []struct {
		engine, api string
		available   bool
		detail      string
	}{
		{"20.10.24", "1.41", true, "Docker Engine 20.10.24 (API 1.41)"},
		{"28.2.2", "1.50", true, "Docker Engine 28.2.2 (API 1.50)"},
		{"19.03.15", "1.40", false, "needs API 1.41"},
		{"?", "", false, "needs API 1.41"},
	} {
		fp := fingerprintOf(tc.engine, tc.api)
		if fp.Available != tc.available || !strings.Contains(fp.Detail, tc.detail) {
			t.Errorf("fingerprintOf(%q, %q) = %+v", tc.engine, tc.api, fp)
		}
	}
}
