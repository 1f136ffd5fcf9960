package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Spec file errors, end to end: every command that reads a spec file
// names the file, the line and the field as the file spells it, says how
// to fix it, and sends nothing.
func TestSpecFileErrors(t *testing.T) {
	addr := startDev(t)
	vars := map[string]string{"TRELLIS_ADDR": addr}
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const td = "family: web\ncontainers:\n  - name: app\n    driver: exec\n"
	const cmd = "    command: [\"/bin/sleep\", \"100\"]\n"
	webYAML := write("web.yaml", td+cmd+"    env:\n      PORT: 8080\n")
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"taskdef: a string for a list", td + "    command: \"/bin/sleep 100\"\n", []string{"taskdef", "register", "-f", "-"},
			`stdin:5: containers[0].command: a list is needed: write ["/bin/sleep", "100"]`},
		{"taskdef: a number for a string, in a file", "", []string{"taskdef", "register", "-f", webYAML},
			webYAML + `:7: containers[0].env.PORT: a string is needed: quote it ("8080")`},
		{"taskdef: a number for a duration", td + cmd + "    stop_timeout: 10\n", []string{"taskdef", "register", "-f", "-"},
			`stdin:6: containers[0].stop_timeout: a duration is needed: write it with a unit, like "10s"`},
		{"taskdef: a YAML 1.1 boolean", td + cmd + "    essential: on\n", []string{"taskdef", "register", "-f", "-"},
			`stdin:6: containers[0].essential: true or false is needed: write true ("on" is a string)`},
		{"taskdef: an unknown field", td + cmd + "    workdir: /srv\n", []string{"taskdef", "register", "-f", "-"},
			`stdin:6: containers[0].workdir: unknown field (ContainerDefinition has: name, driver, image, command, env, working_dir, ports, essential, sidecar, depends_on, health_check, stop_timeout, resources)`},
		{"taskdef: the server's rule, at its line", td + cmd + "    ports: [8080]\n  - name: b\n    driver: exec\n" + cmd + "    ports: [8080]\n",
			[]string{"taskdef", "register", "-f", "-"}, `stdin:10: containers[1].ports[0]: port 8080 clashes with container "app", which also listens on it`},
		{"taskdef: a mesh block's unknown field", td + cmd + "mesh:\n  port: 8080\n  prots: http\n", []string{"taskdef", "register", "-f", "-"},
			"stdin:8: mesh.prots: unknown field: did you mean port?"},
		{"taskdef: a mesh block's rule, at its line", td + cmd + "mesh:\n  port: 8080\n  upstreams:\n    - {service: api, local_port: 15001}\n",
			[]string{"taskdef", "register", "-f", "-"}, "stdin:9: mesh.upstreams[0].local_port: 15001 is the proxy's transparent outbound port: pick another port"},
		{"env: a number for a duration", "name: ls\ntask_definition: ls:1\ndeployment:\n  min_healthy_time: 10\n", []string{"env", "create", "-f", "-"},
			`stdin:4: deployment.min_healthy_time: a duration is needed: write it with a unit, like "10s"`},
		{"env: a misspelt field", "name: ls\ntaskdef: ls:1\n", []string{"env", "create", "-f", "-"},
			"stdin:2: taskdef: unknown field: did you mean task_definition?"},
		{"resource: JSON, a number for a string", "{\n  \"type\": \"core/v1/Namespace\",\n  \"name\": \"a\",\n  \"data\": {\"description\": 7}\n}\n",
			[]string{"resource", "apply", "-f", "-"}, `stdin:4: data.description: a string is needed: quote it ("7")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, tc.stdin, vars, tc.args...)
			if code != 1 || errOut != "Error: "+tc.want+"\n" {
				t.Fatalf("exit %d\nstderr %q\nwant   %q\nstdout %s", code, errOut, "Error: "+tc.want+"\n", out)
			}
		})
	}
	// Nothing was registered or created.
	if out := mustRun(t, "", "taskdef", "list", "-addr", addr); !strings.Contains(out, "No task definitions") {
		t.Fatalf("a refused definition was registered:\n%s", out)
	}

	// YAML 1.2: y and on are strings, kept as written.
	mustRun(t, "family: y\ncontainers:\n  - name: y\n    driver: exec\n    command: [/bin/true]\n    env: {DEBUG: on, VERBOSE: no}\n",
		"taskdef", "register", "-addr", addr, "-f", "-")
	out := mustRun(t, "", "taskdef", "show", "y:1", "-addr", addr, "-o", "json")
	for _, want := range []string{`"family": "y"`, `"name": "y"`, `"DEBUG": "on"`, `"VERBOSE": "no"`} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %s:\n%s", want, out)
		}
	}
}

// `resource apply` checks every document of a file before it writes any:
// a bad later document writes nothing, with or without --atomic.
func TestApplyChecksTheWholeFileFirst(t *testing.T) {
	addr := startDev(t)
	dir := t.TempDir()
	const good = "type: core/v1/Namespace\nname: first\n---\ntype: core/v1/Namespace\nname: second\ndata: {description: fine}\n---\n"
	for _, tc := range []struct {
		name, bad, want string
	}{
		{"a wrong type in the data", "type: core/v1/Namespace\nname: third\ndata:\n  description: 42\n",
			`:11: data.description: a string is needed: quote it ("42")`},
		{"a name the server would refuse", "type: core/v1/Namespace\nname: Third\n",
			`:9: name: "Third" is not a valid name: must be a lowercase DNS label (a-z, 0-9, '-', at most 63 characters)`},
		{"a task definition the server would refuse", "type: orchestrator/v1/TaskDefinition\nname: web-1\ndata:\n  family: web\n  revision: 1\n  containers: []\n",
			":13: data.containers: a task needs at least one container"},
		{"malformed YAML", "type: core/v1/Namespace\nname: [third\n", ":9: malformed YAML: did not find expected ',' or ']': a [ opened here is not closed"},
	} {
		for _, atomic := range []bool{false, true} {
			name := tc.name
			if atomic {
				name += " (atomic)"
			}
			t.Run(name, func(t *testing.T) {
				file := filepath.Join(dir, "ns.yaml")
				if err := os.WriteFile(file, []byte(good+tc.bad), 0o644); err != nil {
					t.Fatal(err)
				}
				args := []string{"resource", "apply", "-addr", addr, "-f", file}
				if atomic {
					args = append(args, "--atomic")
				}
				code, out, errOut := run(t, "", nil, args...)
				if code != 1 || errOut != "Error: "+file+tc.want+"\n" {
					t.Fatalf("exit %d, stderr %q, want %q", code, errOut, file+tc.want)
				}
				if out != "" {
					t.Fatalf("something was applied:\n%s", out)
				}
				for _, ns := range []string{"first", "second"} {
					if code, _, _ := run(t, "", nil, "resource", "get", "core/v1/Namespace", ns, "-addr", addr); code != 1 {
						t.Fatalf("%s was written", ns)
					}
				}
			})
		}
	}
	// The same file, fixed, applies whole.
	out := mustRun(t, good+"type: core/v1/Namespace\nname: third\n", "resource", "apply", "-addr", addr, "-f", "-")
	if strings.Count(out, " applied ") != 3 {
		t.Fatalf("apply:\n%s", out)
	}
}
