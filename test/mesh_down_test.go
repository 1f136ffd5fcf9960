//go:build linux

package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"trellis.dev/trellis/internal/testcluster"
)

// meshDaemonSpec is a mesh task of family name, deployed as a daemon:
// one exec container, the app's port in the mesh block.
func meshDaemonSpec(name string, port int, upstream string) string {
	spec := fmt.Sprintf(`family: %s
containers:
  - name: app
    driver: exec
    command: ["/bin/sh", "-c", "exec sleep 1000"]
    stop_timeout: 2s
mesh:
  port: %d
  protocol: http
`, name, port)
	if upstream != "" {
		spec += fmt.Sprintf("  upstreams:\n    - {service: %s, local_port: 9191}\n", upstream)
	}
	return spec
}

// passingNodes is, from one server, the nodes (instances) of service's
// passing instances as Consul's health route answers them, sorted; nil
// when the server does not answer.
func passingNodes(server *testcluster.Member, service string) []string {
	resp, err := httpClient.Get("http://" + server.HTTPAddr + "/v1/health/service/" + service + "?passing")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	var entries []struct {
		Node struct {
			Node string `json:"Node"`
		} `json:"Node"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&entries); err != nil {
		return nil
	}
	nodes := []string{}
	for _, e := range entries {
		nodes = append(nodes, e.Node.Node)
	}
	slices.Sort(nodes)
	return nodes
}

// The mesh's control plane across processes: 3 servers, 2 agents, two
// mesh services (web calling api) deployed as daemons. Both services
// have a passing instance on each agent, on every server (followers
// answer from their own cache). An agent killed with SIGKILL cannot say
// its tasks stopped: the servers mark its instance down, set its service
// instances' checks critical, and its instances leave the passing
// answers of every server, the other agent's staying; once it is back
// they return.
func TestMeshAgentDownLeavesThePassingAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	becomeSubreaper(t)
	dir := t.TempDir()
	bin := trellisBinary(t)
	c, err := testcluster.Start(t.Context(), testcluster.Options{Bin: bin, Dir: dir, Servers: 3, Extra: []string{"-heartbeat-ttl", orchTTL.String()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range c.Members {
				b, _ := os.ReadFile(m.LogPath)
				t.Logf("--- %s log ---\n%s", m.Name, tail(b, 3000))
			}
		}
	})
	e := &orchEnv{t: t, bin: bin, dir: dir, server: c.Members[0]}
	suffix := randomSuffix(t)[:6]
	var names []string
	for i := range 2 {
		a, err := testcluster.StartAgent(testcluster.AgentOptions{Bin: bin, Dir: dir, Name: fmt.Sprintf("mesh%d-%s", i+1, suffix), Servers: []string{c.Members[i+1].GRPCAddr}})
		if err != nil {
			t.Fatal(err)
		}
		e.agents = append(e.agents, a)
		names = append(names, a.Name)
	}
	t.Cleanup(e.cleanup)
	for _, a := range e.agents {
		e.waitInstance(a.Name, "registers ready", func(in instanceJSON) bool { return in.state() == "ready" })
	}

	e.register("api.yaml", meshDaemonSpec("api", 9090, ""))
	e.register("web.yaml", meshDaemonSpec("web", 8080, "api"))
	for _, family := range []string{"api", "web"} {
		e.mustCLI("env", "create", family, "--taskdef", family+":1")
		e.mustCLI("deploy", family)
	}
	both := slices.Sorted(slices.Values(names))
	waitNodes := func(what string, service string, want []string) {
		t.Helper()
		for _, m := range c.Members {
			if err := pollUntil(t.Context(), 60*time.Second, func() bool { return slices.Equal(passingNodes(m, service), want) }); err != nil {
				t.Fatalf("%s: %s passing on %s: %v, want %v", what, service, m.Name, passingNodes(m, service), want)
			}
		}
	}
	waitNodes("deployed", "api", both)
	waitNodes("deployed", "web", both)
	// The tasks' processes, so that the cleanup ends them: the killed
	// agent's outlive it, as they are meant to.
	var tasks struct {
		Resources []struct {
			ID struct {
				Name string `json:"name"`
			} `json:"id"`
		} `json:"resources"`
	}
	if err := e.get("Task?namespace=default", &tasks); err != nil {
		t.Fatal(err)
	}
	if len(tasks.Resources) != 4 {
		t.Fatalf("%d tasks, want 4: api and web on each agent", len(tasks.Resources))
	}
	for _, tk := range tasks.Resources {
		e.groups = append(e.groups, e.trackPIDs(execOnly(e.waitRunningContainers(tk.ID.Name, "app"), "app"))...)
	}

	down := e.agents[0]
	down.Kill()
	e.waitInstance(down.Name, "is marked down", func(in instanceJSON) bool { return in.state() == "down" })
	waitNodes("an agent down", "api", []string{names[1]})
	waitNodes("an agent down", "web", []string{names[1]})
	out := e.mustCLI("service", "show", "api")
	if !strings.Contains(out, "critical") {
		t.Errorf("trellis service show api with %s down shows no critical check:\n%s", down.Name, out)
	}

	if err := down.Start(); err != nil {
		t.Fatal(err)
	}
	e.waitInstance(down.Name, "is ready again", func(in instanceJSON) bool { return in.state() == "ready" })
	waitNodes("the agent back", "api", both)
	waitNodes("the agent back", "web", both)
}
