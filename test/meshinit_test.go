//go:build linux

package test

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"trellis.dev/trellis/internal/netns"
	"trellis.dev/trellis/internal/testcluster"
)

// meshBridgeSpec is a bridge task of the mesh: one exec container, the
// app's port 8080 in the task's namespace, transparent redirection.
const meshBridgeSpec = `family: e2e-mesh
network: bridge
containers:
  - name: app
    driver: exec
    command: ["/bin/sh", "-c", "exec sleep 1000"]
    stop_timeout: 2s
mesh:
  service: e2e-web
  port: 8080
  transparent: true
`

type serviceInstanceJSON struct {
	ID struct {
		UID string `json:"uid"`
	} `json:"id"`
	Data struct {
		Service string `json:"service"`
		Address string `json:"address"`
		Port    int    `json:"port"`
		Proxy   struct {
			Port int    `json:"port"`
			Mode string `json:"mode"`
		} `json:"proxy"`
		Instance string `json:"instance"`
		Task     string `json:"task"`
	} `json:"data"`
}

// serviceInstance reads the ServiceInstance called name of namespace
// default through the HTTP API: ok false when there is none.
func (e *orchEnv) serviceInstance(name string) (si serviceInstanceJSON, ok bool) {
	e.t.Helper()
	resp, err := httpClient.Get("http://" + e.server.HTTPAddr + "/v1/resources/catalog/v1/ServiceInstance/" + name)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case http.StatusNotFound:
		return si, false
	case http.StatusOK:
	default:
		e.t.Fatalf("GET service instance %s: %s: %s", name, resp.Status, b)
	}
	if err := json.Unmarshal(b, &si); err != nil {
		e.t.Fatal(err)
	}
	return si, true
}

// A bridge task of the mesh, run by a real agent process: its
// ServiceInstance has the task's address in its namespace and a
// transparent proxy; the agent killed with SIGKILL and started again
// registers nothing new, and removes the instance when the task stops.
// The task's namespace has the redirect of a transparent task (outbound
// TCP to the proxy's 15001, DNS to the agent) once, before and after the
// restart, and goes, with its rules, when the task stops.
func TestMeshBridgeTask(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	requireCNI(t)
	becomeSubreaper(t)
	dir := t.TempDir()
	bin := trellisBinary(t)
	c, err := testcluster.Start(t.Context(), testcluster.Options{Bin: bin, Dir: dir, Servers: 1, Extra: []string{"-heartbeat-ttl", orchTTL.String()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	e := &orchEnv{t: t, bin: bin, dir: dir, server: c.Members[0]}
	suffix := randomSuffix(t)
	bridge := "trmi" + suffix[:6]
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", bridge).Run() })
	a, err := testcluster.StartAgent(testcluster.AgentOptions{
		Bin: bin, Dir: dir, Name: "mesh-" + suffix[:6], Servers: []string{e.server.GRPCAddr},
		Extra: []string{"-bridge-name", bridge, "-bridge-subnet", fmt.Sprintf("10.250.%d.0/24", rand.IntN(256))},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.agents = []*testcluster.Agent{a}
	t.Cleanup(e.cleanup)
	e.waitInstance(a.Name, "registers ready", func(in instanceJSON) bool { return in.Data.Status == "ready" })

	e.register("mesh.yaml", meshBridgeSpec)
	name := e.run("e2e-mesh", a.Name)
	tk := e.waitTask(name, "runs with its network", func(tk taskJSON) bool {
		return tk.Data.LastStatus == "RUNNING" && tk.Data.Network.Address != ""
	})
	e.groups = append(e.groups, e.trackPIDs(execOnly(e.waitRunningContainers(name, "app"), "app"))...)
	si, ok := e.serviceInstance(name)
	if !ok {
		t.Fatal("no service instance for the running mesh task")
	}
	if si.Data.Service != "e2e-web" || si.Data.Address != tk.Data.Network.Address || si.Data.Port != 8080 ||
		si.Data.Proxy.Port != 15000 || si.Data.Proxy.Mode != "transparent" || si.Data.Instance != a.Name || si.Data.Task != name {
		t.Errorf("service instance %+v; the task's address is %s", si.Data, tk.Data.Network.Address)
	}
	nsPath := tk.Data.Network.NamespacePath
	checkTransparentRules(t, nsPath, "after the start")

	a.Kill()
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	e.waitInstance(a.Name, "is ready again", func(in instanceJSON) bool { return in.Data.Status == "ready" })
	e.waitTask(name, "is adopted by the restarted agent", func(tk taskJSON) bool { return tk.Data.LastStatus == "RUNNING" })
	if again, ok := e.serviceInstance(name); !ok || again.ID.UID != si.ID.UID || again.Data != si.Data {
		t.Errorf("after the restart the service instance is %+v (present %v), was %+v", again, ok, si)
	}
	checkTransparentRules(t, nsPath, "after the agent's restart")

	e.mustCLI("task", "stop", name)
	e.waitTask(name, "stops", func(tk taskJSON) bool { return tk.Data.LastStatus == "STOPPED" })
	if si, ok := e.serviceInstance(name); ok {
		t.Errorf("the service instance is still there once the task is STOPPED: %+v", si)
	}
	if netns.Is(nsPath) {
		t.Errorf("the task's namespace %s, and its rules, are still there once the task is STOPPED", nsPath)
	}
	if t.Failed() {
		b, _ := os.ReadFile(e.server.LogPath)
		t.Logf("--- server log ---\n%s", tail(b, 4000))
	}
}

// checkTransparentRules reads the nat table of the namespace at path and
// wants the agent's redirect of a transparent mesh task there, once.
func checkTransparentRules(t *testing.T, path, when string) {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+path, "iptables-save", "-t", "nat").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables-save in %s: %v: %s", path, err, out)
	}
	want := map[string]int{
		"-A OUTPUT -p tcp -m addrtype ! --dst-type LOCAL -j TRELLIS_OUTBOUND": 1,
		"-A OUTPUT -j TRELLIS_DNS":                                1,
		"-A TRELLIS_OUTBOUND -p tcp -j REDIRECT --to-ports 15001": 1,
		"-A TRELLIS_OUTBOUND -m owner --uid-owner 1337 -j RETURN": 1,
	}
	got := map[string]int{}
	for _, line := range strings.Split(string(out), "\n") {
		if _, ok := want[line]; ok {
			got[line]++
		}
	}
	for line, n := range want {
		if got[line] != n {
			t.Errorf("%s: %q is in the task's nat table %d times, want %d:\n%s", when, line, got[line], n, out)
		}
	}
}
