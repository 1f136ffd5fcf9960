package main

import (
	"strings"
	"testing"
	"time"
	"trellis.dev/trellis/internal/agent"
)

const webSpec = `family: web
containers:
  - name: app
    driver: exec
    command: ["/bin/sh", "-c", "echo hello; exec sleep 600"]
    env: {LOG_LEVEL: info}
    ports: [8080]
    depends_on: [{container: proxy, condition: START}]
  - name: proxy
    driver: exec
    command: ["/bin/sh", "-c", "exec sleep infinity"]
    sidecar: true
restart_policy: {attempts: 3, interval: 5m, delay: 5s}
`

// expecter returns a function that runs a command line against the server
// at addr, checks its exit status and that its output holds want, and
// returns its stdout.
func expecter(t *testing.T, addr string) func(wantCode int, stdin, want string, args ...string) string {
	vars := map[string]string{"TRELLIS_ADDR": addr}
	return func(wantCode int, stdin, want string, args ...string) string {
		t.Helper()
		code, out, errOut := run(t, stdin, vars, args...)
		if code != wantCode || !strings.Contains(out+errOut, want) {
			t.Fatalf("%v: exit %d, want %d with %q\nstdout: %s\nstderr: %s", args, code, wantCode, want, out, errOut)
		}
		return out
	}
}

// The task definition commands against a real in-process server: revisions
// are assigned, an unchanged definition is not registered again, and bad
// input is refused with the field named.
func TestTaskDefCommands(t *testing.T) {
	addr := startDev(t)
	expect := expecter(t, addr)
	expect(0, webSpec, "registered web:1", "taskdef", "register", "-f", "-")
	expect(0, webSpec, "web:1 is already this definition: nothing registered", "taskdef", "register", "-f", "-")
	expect(0, strings.Replace(webSpec, "info", "debug", 1), "registered web:2", "taskdef", "register", "-f", "-")
	out := expect(0, "", "web:2", "taskdef", "list", "web")
	if strings.Index(out, "web:2") > strings.Index(out, "web:1") {
		t.Errorf("list is not latest first:\n%s", out)
	}
	expect(0, "", "proxy:START", "taskdef", "show", "web")
	expect(0, "", `"family": "web"`, "taskdef", "show", "web:1", "-o", "json")
	// Refusals name the line and the field as the file spells it.
	expect(1, strings.Replace(webSpec, "condition: START", "condition: READY", 1), `stdin:8: containers[0].depends_on[0].condition: "READY" is not a condition`, "taskdef", "register", "-f", "-")
	expect(1, strings.Replace(webSpec, "driver: exec", "driver: rkt", 1), `stdin:4: containers[0].driver: "rkt" is not a driver`, "taskdef", "register", "-f", "-")
	expect(1, strings.Replace(webSpec, "sidecar: true", "sidecar: true\n    ports: [8080]", 1), `port 8080 clashes with container "app"`, "taskdef", "register", "-f", "-")
	expect(1, strings.Replace(webSpec, "sidecar: true", "sidecar: true\n    depends_on: [{container: app}]", 1), "depends_on has a cycle: app -> proxy -> app", "taskdef", "register", "-f", "-")
	expect(1, strings.Replace(webSpec, "ports:", "prots:", 1), "stdin:7: containers[0].prots: unknown field: did you mean ports?", "taskdef", "register", "-f", "-")
	expect(1, "", "task definition web:9 is not registered", "taskdef", "show", "web:9")
	// Nothing refused was stored.
	out = expect(0, "", "web:2", "taskdef", "list")
	if strings.Count(out, "web:") != 2 {
		t.Errorf("refused registrations left revisions behind:\n%s", out)
	}
}

// Instance and task commands on an instance registered by hand (the agent
// has its own tests): drain refuses placements, attributes round-trip,
// and a placed task shows up and can be stopped.
func TestInstanceAndTaskCommands(t *testing.T) {
	addr := startDev(t)
	expect := expecter(t, addr)
	expect(0, webSpec, "registered web:1", "taskdef", "register", "-f", "-")
	expect(0, "{type: orchestrator/v1/Instance, name: node-1, data: {cluster: dev, attributes: {os: linux, zone: a}}}", "applied", "resource", "apply", "-f", "-")
	expect(0, "", "zone=a", "instance", "list")
	expect(0, "", "instance node-1: set rack=r1,zone=b", "instance", "set-attribute", "node-1", "zone=b", "rack=r1")
	expect(2, "", `attribute "os" is set by the agent itself`, "instance", "set-attribute", "node-1", "os=plan9")
	expect(0, "", "instance node-1: removed rack", "instance", "remove-attribute", "node-1", "rack")
	expect(0, "", "instance node-1: set tags=a,b", "instance", "set-attribute", "node-1", "tags=a,b")
	expect(0, "", "tags   a,b", "instance", "show", "node-1")
	out := expect(0, "", "zone=b", "instance", "list")
	if strings.Contains(out, "rack") {
		t.Errorf("rack was not removed:\n%s", out)
	}
	expect(0, "", "instance node-1 is draining", "instance", "drain", "node-1")
	expect(1, "", "instance node-1 is draining: tasks are placed only on ready instances", "task", "run", "--taskdef", "web:1", "--instance", "node-1")
	expect(0, "", "instance node-1 is ready", "instance", "undrain", "node-1")
	expect(1, "", `instance "node-9" is not registered`, "task", "run", "--taskdef", "web:1", "--instance", "node-9")
	out = expect(0, "", "placed on node-1", "task", "run", "--taskdef", "web", "--instance", "node-1")
	name := strings.Fields(out)[1]
	expect(0, "", "PENDING", "task", "list", "--instance", "node-1")
	expect(0, "", "Task definition:   web:1", "task", "show", name)
	expect(0, "", name, "instance", "show", "node-1")
	expect(0, "", "task "+name+" is stopping", "task", "stop", name, "--reason", "testing")
	expect(0, "", "Stop reason:       stopped by user: testing", "task", "show", name)
	expect(0, "", "already stopping", "task", "stop", name)
}

// waitFor polls cond until it holds, failing the test after 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The newcomer's path: trellis dev runs local agents, so a registered task
// definition runs as a real process at once, and its logs show.
func TestDevRunsATask(t *testing.T) {
	addr := startDev(t, "-instances", "2")
	vars := map[string]string{"TRELLIS_ADDR": addr}
	waitFor(t, "both local instances are ready", func() bool {
		_, out, _ := run(t, "", vars, "instance", "list")
		return strings.Count(out, " ready ") == 2 && strings.Contains(out, "zone=zone-2")
	})
	spec := `{family: hello, containers: [{name: main, driver: exec, command: [/bin/sh, -c, "echo hello from trellis; exec sleep 600"]}]}`
	if code, out, errOut := run(t, spec, vars, "taskdef", "register", "-f", "-"); code != 0 {
		t.Fatalf("register: %d %s %s", code, out, errOut)
	}
	code, out, errOut := run(t, "", vars, "task", "run", "--taskdef", "hello", "--instance", "dev-2")
	if code != 0 {
		t.Fatalf("run: %d %s %s", code, out, errOut)
	}
	name := strings.Fields(out)[1]
	waitFor(t, "the task runs", func() bool {
		_, out, _ := run(t, "", vars, "task", "show", name)
		return strings.Contains(out, "Last status:       RUNNING")
	})
	waitFor(t, "its output shows in its logs", func() bool {
		_, out, _ := run(t, "", vars, "task", "logs", name)
		return strings.Contains(out, "hello from trellis")
	})

	// A process that cannot start: the task ends STOPPED with the driver's
	// error as its reason.
	broken := `{family: broken, containers: [{name: main, driver: exec, command: [/no/such/program]}]}`
	if code, out, errOut := run(t, broken, vars, "taskdef", "register", "-f", "-"); code != 0 {
		t.Fatalf("register: %d %s %s", code, out, errOut)
	}
	_, out, _ = run(t, "", vars, "task", "run", "--taskdef", "broken", "--instance", "dev-1")
	name = strings.Fields(out)[1]
	waitFor(t, "the broken task stops with the driver's error", func() bool {
		_, out, _ := run(t, "", vars, "task", "show", name)
		return strings.Contains(out, "Last status:       STOPPED") && strings.Contains(out, "/no/such/program") && strings.Contains(out, "no such file")
	})
}

func TestRotate(t *testing.T) {
	list := []string{"a", "b", "c"}
	for i, want := range []string{"a,b,c", "b,c,a", "c,a,b"} {
		if got := strings.Join(agent.RotateServers(list, i), ","); got != want {
			t.Errorf("RotateServers(%d) = %s, want %s", i, got, want)
		}
	}
	if strings.Join(list, ",") != "a,b,c" {
		t.Error("RotateServers changed its input")
	}
}
