//go:build linux

package test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"trellis.dev/trellis/internal/netns"
	"trellis.dev/trellis/internal/tasknet"
	"trellis.dev/trellis/internal/testcluster"
)

type networkJSON struct {
	Mode          string `json:"mode"`
	NamespacePath string `json:"namespace_path"`
	Address       string `json:"address"`
	Ports         []struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"container_port"`
		HostPort      int    `json:"host_port"`
		Protocol      string `json:"protocol"`
	} `json:"ports"`
}

// bridgeSpec is a bridge task: an exec app serving HTTP on 8080 in the
// task's namespace, published on a host port the agent picks; a
// container that reads the task's metadata from inside the namespace;
// and, with docker, a docker container that calls the exec app on
// 127.0.0.1 and one the exec side calls back.
const bridgeSpec = `family: e2e-bridge
network: bridge
ports:
  - {name: http, container_port: 8080}
containers:
  - name: app
    driver: exec
    command: ["%[1]s", "serve", "8080"]
    stop_timeout: 5s
  - name: meta
    driver: exec
    command: ["/bin/sh", "-c", "%[1]s get \"$TRELLIS_TASK_METADATA_URI\" > metadata.json; exec sleep 1000"]
    stop_timeout: 2s
`

const bridgeDockerSpec = `  - name: dclient
    driver: docker
    image: %[2]s
    command: ["/driverprobe", "get", "http://127.0.0.1:8080/"]
    essential: false
  - name: dserver
    driver: docker
    image: %[2]s
    command: ["/driverprobe", "serve", "8081"]
    stop_timeout: 5s
  - name: eclient
    driver: exec
    command: ["%[1]s", "get", "http://127.0.0.1:8081/"]
    essential: false
`

// requireCNI skips where bridge networking truly cannot run (not root,
// no plugins); CI sets TRELLIS_REQUIRE_CNI and installs them.
func requireCNI(t *testing.T) {
	t.Helper()
	reason := ""
	if os.Geteuid() != 0 {
		reason = "needs root: bridge tasks make network namespaces"
	} else if err := tasknet.Probe(tasknet.DefaultConfig("/")); err != nil {
		reason = err.Error()
	}
	if reason == "" {
		return
	}
	if os.Getenv("TRELLIS_REQUIRE_CNI") != "" {
		t.Fatalf("TRELLIS_REQUIRE_CNI is set, but: %s", reason)
	}
	t.Skip(reason)
}

// TestBridgeTaskEndToEnd runs a bridge task as users do (the trellis
// binary: a server and an agent, driven by the CLI): its containers share
// one namespace and reach each other on 127.0.0.1, its port is published
// on the host, its metadata (with its network) is read from inside it;
// the agent is killed with SIGKILL and restarted, and keeps the task's
// namespace, address and port; a bridge task stopped while the agent was
// away has its network released when the agent returns; and once the
// tasks stop nothing of their networks is left.
func TestBridgeTaskEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	requireCNI(t)
	becomeSubreaper(t)
	ctx := t.Context()
	dir := t.TempDir()
	bin := trellisBinary(t)
	probe := filepath.Join(dir, "driverprobe")
	if out, err := exec.Command("go", "build", "-o", probe, "../internal/driver/docker/testdata/driverprobe").CombinedOutput(); err != nil {
		t.Fatalf("build driverprobe: %v: %s", err, out)
	}
	docker, image := probeDocker(t)

	c, err := testcluster.Start(ctx, testcluster.Options{Bin: bin, Dir: dir, Servers: 1, Extra: []string{"-heartbeat-ttl", orchTTL.String()}})
	if err != nil {
		t.Fatal(err)
	}
	server := c.Members[0]
	e := &orchEnv{t: t, bin: bin, dir: dir, server: server, docker: docker}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			b, _ := os.ReadFile(server.LogPath)
			t.Logf("--- server log ---\n%s", tail(b, 6000))
		}
	})
	// A bridge and a subnet of this test's own, so that it shares nothing
	// with an agent or test running beside it; the bridge goes at the end.
	suffix := randomSuffix(t)
	bridge := "tre2e" + suffix[:6]
	subnet := fmt.Sprintf("10.251.%d.0/24", rand.IntN(256))
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", bridge).Run() })
	a, err := testcluster.StartAgent(testcluster.AgentOptions{
		Bin: bin, Dir: dir, Name: "e2e-bridge-" + suffix, Servers: []string{server.GRPCAddr},
		Extra: []string{"-bridge-name", bridge, "-bridge-subnet", subnet},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.agents = []*testcluster.Agent{a}
	// After the agent is killed (cleanups run last first): whatever a
	// failed run left of the networks is swept as a restarted agent would.
	t.Cleanup(func() {
		cfg := tasknet.DefaultConfig(filepath.Join(a.DataDir, "network"))
		cfg.Bridge, cfg.Subnet = bridge, netip.MustParsePrefix(subnet)
		nw, err := tasknet.New(cfg, nil)
		if err == nil {
			_, err = nw.Sweep(context.Background(), nil)
		}
		if err != nil {
			t.Errorf("cleanup: sweep the task networks: %v", err)
		}
	})
	t.Cleanup(e.cleanup)

	in := e.waitInstance(a.Name, "registers ready", func(in instanceJSON) bool { return in.Data.Status == "ready" })
	if got := in.Data.Attributes["network.bridge"]; got != "true" {
		t.Fatalf("instance %s: network.bridge = %q, want true (the plugins are here)", a.Name, got)
	}

	spec := fmt.Sprintf(bridgeSpec, probe)
	if docker != nil {
		spec += fmt.Sprintf(bridgeDockerSpec, probe, image)
	}
	e.register("bridge.yaml", spec)
	t1 := e.run("e2e-bridge", a.Name)
	tk := e.waitTask(t1, "runs with its network", func(tk taskJSON) bool {
		return tk.Data.LastStatus == "RUNNING" && tk.Data.Network.Address != "" && tk.container("app").Status == "RUNNING"
	})
	n := tk.Data.Network
	if n.Mode != "bridge" || !netns.Is(n.NamespacePath) || !strings.HasPrefix(n.NamespacePath, a.DataDir+"/") ||
		len(n.Ports) != 1 || n.Ports[0].Name != "http" || n.Ports[0].ContainerPort != 8080 || n.Ports[0].HostPort == 0 || n.Ports[0].Protocol != "tcp" {
		t.Fatalf("task network %+v", n)
	}
	e.groups = append(e.groups, e.trackPIDs(execOnly(e.waitRunningContainers(t1, "app", "meta"), "app", "meta"))...)
	published := "http://127.0.0.1:" + strconv.Itoa(n.Ports[0].HostPort) + "/"
	waitHTTP(t, published, "probe")

	// The metadata, read from inside the task's namespace.
	uid := e.taskUID(t1)
	md := e.waitFile(filepath.Join(a.DataDir, "tasks", uid, "metadata.json"))
	for _, want := range []string{`"mode":"bridge"`, `"namespace_path":"` + n.NamespacePath + `"`, `"address":"` + n.Address + "/", `"host_port":` + strconv.Itoa(n.Ports[0].HostPort)} {
		if !strings.Contains(md, want) {
			t.Errorf("metadata read in the task lacks %s: %s", want, md)
		}
	}
	if out := e.mustCLI("task", "show", t1); !strings.Contains(out, n.NamespacePath) ||
		!strings.Contains(out, fmt.Sprintf("http %d/tcp -> 8080", n.Ports[0].HostPort)) {
		t.Errorf("task show:\n%s", out)
	}
	if docker != nil {
		e.waitTask(t1, "has its docker and exec clients done", func(tk taskJSON) bool {
			return tk.container("dclient").Status == "STOPPED" && tk.container("eclient").Status == "STOPPED"
		})
		for _, cl := range []string{"dclient", "eclient"} {
			if c := tk2(e, t1).container(cl); c.ExitCode == nil || *c.ExitCode != 0 {
				t.Errorf("%s could not reach its peer on 127.0.0.1: %+v", cl, c)
			}
			e.waitLogs(t1, cl, "says what it got", func(s string) bool { return strings.Contains(s, "probe") })
		}
	}

	// A second bridge task, which will be stopped while the agent is away.
	t2 := e.run("e2e-bridge", a.Name)
	tk2run := e.waitTask(t2, "runs with its network", func(tk taskJSON) bool {
		return tk.Data.LastStatus == "RUNNING" && tk.Data.Network.Address != ""
	})
	e.groups = append(e.groups, e.trackPIDs(execOnly(e.waitRunningContainers(t2, "app", "meta"), "app", "meta"))...)
	if docker != nil {
		// Every container of it started before the kill: one started and
		// not yet recorded when the agent dies is another matter (the
		// docker driver refuses to start it again).
		e.waitTask(t2, "has started all its containers", func(tk taskJSON) bool {
			return tk.container("dserver").Status == "RUNNING" && tk.container("dclient").Status == "STOPPED" && tk.container("eclient").Status == "STOPPED"
		})
	}
	n2 := tk2run.Data.Network
	if n2.Address == n.Address || n2.Ports[0].HostPort == n.Ports[0].HostPort {
		t.Fatalf("two tasks share an address or a port: %+v, %+v", n, n2)
	}

	// SIGKILL: the namespaces stay, the app serves on.
	before := tk2(e, t1)
	a.Kill()
	if !netns.Is(n.NamespacePath) || !netns.Is(n2.NamespacePath) {
		t.Fatal("a namespace went with the agent")
	}
	waitHTTP(t, published, "probe")
	e.mustCLI("task", "stop", t2)
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	after := e.waitTask(t1, "is adopted by the restarted agent", func(tk taskJSON) bool {
		return tk.Data.LastStatus == "RUNNING" && tk.Data.Network.Address != ""
	})
	if after.Data.Network.NamespacePath != n.NamespacePath || after.Data.Network.Address != n.Address || after.Data.Network.Ports[0].HostPort != n.Ports[0].HostPort {
		t.Errorf("after the restart the network is %+v, was %+v", after.Data.Network, n)
	}
	sameRuntimeIDs(t, t1, before, after)
	waitHTTP(t, published, "probe")
	e.waitTask(t2, "stops", func(tk taskJSON) bool { return tk.Data.LastStatus == "STOPPED" })
	e.waitGoneNetwork(a, n2)

	// The last task stops: nothing of the networks is left.
	e.mustCLI("task", "stop", t1)
	e.waitTask(t1, "stops", func(tk taskJSON) bool { return tk.Data.LastStatus == "STOPPED" })
	e.waitGoneNetwork(a, n)
	if docker != nil {
		ids, err := docker.Containers(ctx, "trellis.agent="+a.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if ok, _ := docker.Running(ctx, id); ok {
				t.Errorf("container %s (a holder?) still runs after the task stopped", id)
			}
		}
	}
}

func tk2(e *orchEnv, name string) taskJSON { return e.task(name) }

// execOnly is tk with only the named (exec) containers, whose runtime ids
// are pids.
func execOnly(tk taskJSON, names ...string) taskJSON {
	out := tk
	out.Data.Containers = nil
	for _, n := range names {
		out.Data.Containers = append(out.Data.Containers, tk.container(n))
	}
	return out
}

// waitRunningContainers waits until the named containers run.
func (e *orchEnv) waitRunningContainers(task string, names ...string) taskJSON {
	e.t.Helper()
	return e.waitTask(task, "has its containers running", func(tk taskJSON) bool {
		for _, n := range names {
			if c := tk.container(n); c.Status != "RUNNING" || c.RuntimeID == "" {
				return false
			}
		}
		return true
	})
}

// taskUID is a task's uid, from the API.
func (e *orchEnv) taskUID(name string) string {
	e.t.Helper()
	var r struct {
		ID struct {
			UID string `json:"uid"`
		} `json:"id"`
	}
	if err := e.get("Task/"+name, &r); err != nil || r.ID.UID == "" {
		e.t.Fatalf("task %s: %v", name, err)
	}
	return r.ID.UID
}

// waitFile waits until path has a whole line in it.
func (e *orchEnv) waitFile(path string) string {
	e.t.Helper()
	var s string
	if pollUntil(e.t.Context(), waitLimit, func() bool {
		b, err := os.ReadFile(path)
		s = string(b)
		return err == nil && strings.HasSuffix(s, "\n")
	}) != nil {
		e.t.Fatalf("%s never written: %q", path, s)
	}
	return s
}

// waitGoneNetwork waits until nothing is left of a task's network: its
// namespace's mount point, its lease, its iptables rules.
func (e *orchEnv) waitGoneNetwork(a *testcluster.Agent, n networkJSON) {
	e.t.Helper()
	var left []string
	if pollUntil(e.t.Context(), waitLimit, func() bool {
		left = nil
		if _, err := os.Lstat(n.NamespacePath); err == nil {
			left = append(left, "namespace "+n.NamespacePath)
		}
		if _, err := os.Lstat(filepath.Join(a.DataDir, "network", "ipam", "trellis", n.Address)); err == nil {
			left = append(left, "lease of "+n.Address)
		}
		out, _ := exec.Command("iptables-save").Output()
		for line := range strings.SplitSeq(string(out), "\n") {
			if strings.Contains(line, n.Address+"/32") || strings.Contains(line, "--dport "+strconv.Itoa(n.Ports[0].HostPort)+" ") {
				left = append(left, "rule "+line)
			}
		}
		return len(left) == 0
	}) != nil {
		e.t.Fatalf("left of the network of %s: %v", n.Address, left)
	}
}

// waitHTTP waits until url answers with body.
func waitHTTP(t *testing.T, url, body string) {
	t.Helper()
	var got string
	var err error
	if pollUntil(t.Context(), waitLimit, func() bool {
		var resp *http.Response
		resp, err = httpClient.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got = string(b)
		return got == body
	}) != nil {
		t.Fatalf("GET %s: %q, %v; want %q", url, got, err, body)
	}
}
