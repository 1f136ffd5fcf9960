package command

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"trellis.dev/trellis/internal/cli"
)

const webTaskDef = `family: web
containers:
  - name: app
    driver: exec
    command: ["/bin/sleep", "100"]
    env: {PORT: "8080", DEBUG: "on"}
    ports: [8080]
    essential: true
    depends_on: [{container: proxy, condition: HEALTHY}]
    health_check: {http: "http://127.0.0.1:8080/healthz", interval: 5s, timeout: 2s, retries: 3, start_period: 10s}
    stop_timeout: 30s
    resources: {cpu_millis: 500, memory_bytes: 268435456}
  - name: proxy
    driver: exec
    command: ["/bin/sh", "-c", "exec sleep infinity"]
    sidecar: true
restart_policy: {attempts: 3, interval: 5m, delay: 5s}
`

const webTaskDefJSON = `{
  "family": "web",
  "containers": [
    {"name": "app", "driver": "exec", "command": ["/bin/sleep", "100"], "env": {"PORT": "8080", "DEBUG": "on"},
     "ports": [8080], "essential": true, "depends_on": [{"container": "proxy", "condition": "HEALTHY"}],
     "healthCheck": {"http": "http://127.0.0.1:8080/healthz", "interval": "5s", "timeout": "2s", "retries": 3, "startPeriod": "10s"},
     "stop_timeout": "30s", "resources": {"cpu_millis": 500, "memory_bytes": "268435456"}},
    {"name": "proxy", "driver": "exec", "command": ["/bin/sh", "-c", "exec sleep infinity"], "sidecar": true}
  ],
  "restart_policy": {"attempts": 3, "interval": "5m", "delay": "5s"}
}`

// YAML and JSON (with protojson's camelCase names too) read the same.
func TestParseTaskDefinition(t *testing.T) {
	fromYAML, err := ParseTaskDefinition([]byte(webTaskDef), "web.yaml", testTypes())
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := ParseTaskDefinition([]byte(webTaskDefJSON), "web.json", testTypes())
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(fromYAML.Definition, fromJSON.Definition) {
		t.Fatalf("YAML and JSON differ:\n%v\n%v", fromYAML.Definition, fromJSON.Definition)
	}
	if fromYAML.Family != "web" || fromYAML.Source != "web.yaml" || fromYAML.Definition.GetRevision() != 0 {
		t.Fatalf("got %+v", fromYAML)
	}
	// "on" stays the string it is written as.
	if got := fromYAML.Definition.GetContainers()[0].GetEnv()["DEBUG"]; got != "on" {
		t.Fatalf("DEBUG = %q", got)
	}
	// protojson's other forms of a number will do, as they do for the server.
	lenient, err := ParseTaskDefinition([]byte("family: web\ncontainers:\n  - {name: a, driver: exec, command: [x], ports: [\"8080\", 8081.0, 8.082e3]}\n"), "f", testTypes())
	if err != nil || fmt.Sprint(lenient.Definition.GetContainers()[0].GetPorts()) != "[8080 8081 8082]" {
		t.Fatalf("lenient numbers: %v %v", lenient, err)
	}
	js, _ := protojson.Marshal(fromYAML.Definition)
	if _, err := ParseTaskDefinition(js, "again.json", testTypes()); err != nil {
		t.Fatalf("protojson's own output: %v", err)
	}
}

// Every refusal of a task definition file names the file, the line, the
// field as the file spells it, and what to write instead.
func TestParseTaskDefinitionErrors(t *testing.T) {
	const head = "family: web\ncontainers:\n  - name: app\n    driver: exec\n"
	const cmd = "    command: [\"/bin/sleep\", \"100\"]\n"
	for _, tc := range []struct{ name, in, want string }{
		{"a string for a list", head + "    command: \"/bin/sleep 100\"\n",
			`web.yaml:5: containers[0].command: a list is needed: write ["/bin/sleep", "100"]`},
		{"a shell line for a list", head + "    command: \"echo $HOME | wc\"\n",
			`web.yaml:5: containers[0].command: a list is needed: write ["/bin/sh", "-c", "echo $HOME | wc"] to run it with a shell`},
		{"a number for a string", head + cmd + "    env: {PORT: 8080}\n",
			`web.yaml:6: containers[0].env.PORT: a string is needed: quote it ("8080")`},
		{"a number for a string, block style", head + cmd + "    env:\n      LOG: debug\n      PORT: 8080\n",
			`web.yaml:8: containers[0].env.PORT: a string is needed: quote it ("8080")`},
		{"a boolean for a string", head + cmd + "    env: {DEBUG: true}\n",
			`web.yaml:6: containers[0].env.DEBUG: a string is needed: quote it ("true")`},
		{"a number for a duration", head + cmd + "    stop_timeout: 10\n",
			`web.yaml:6: containers[0].stop_timeout: a duration is needed: write it with a unit, like "10s"`},
		{"camelCase keeps its spelling", head + cmd + "    stopTimeout: 10\n",
			`web.yaml:6: containers[0].stopTimeout: a duration is needed: write it with a unit, like "10s"`},
		{"a nested duration", head + cmd + "    health_check: {command: [\"true\"], interval: 5}\n",
			`web.yaml:6: containers[0].health_check.interval: a duration is needed: write it with a unit, like "5s"`},
		{"a YAML 1.1 boolean", head + cmd + "    essential: on\n",
			`web.yaml:6: containers[0].essential: true or false is needed: write true ("on" is a string)`},
		{"not a boolean", head + cmd + "    sidecar: sometimes\n",
			`web.yaml:6: containers[0].sidecar: true or false is needed, not "sometimes"`},
		{"an unknown field", head + cmd + "    stop_timout: 10s\n",
			"web.yaml:6: containers[0].stop_timout: unknown field: did you mean stop_timeout?"},
		{"an unknown field, nothing close", head + cmd + "    colour: red\n",
			"web.yaml:6: containers[0].colour: unknown field (ContainerDefinition has: name, driver, image, command, env, working_dir, ports, essential, sidecar, depends_on, health_check, stop_timeout, resources)"},
		{"an unknown top field", "family: web\ncontainer: []\n",
			"web.yaml:2: container: unknown field: did you mean containers?"},
		{"both spellings of a field", head + cmd + "    stop_timeout: 1s\n    stopTimeout: 2s\n",
			"web.yaml:7: containers[0].stopTimeout: the same field as stop_timeout (line 6): give it once"},
		{"a word for a number", head + cmd + "    ports: [http]\n",
			`web.yaml:6: containers[0].ports[0]: a whole number is needed, not "http"`},
		{"a negative port", head + cmd + "    ports: [-1]\n",
			"web.yaml:6: containers[0].ports[0]: -1 is out of range: a whole number from 0 to 4294967295 is needed"},
		{"a fraction", head + cmd + "    health_check: {command: [\"true\"], retries: 2.5}\n",
			"web.yaml:6: containers[0].health_check.retries: a whole number is needed, not 2.5"},
		{"one value for a list", head + cmd + "    ports: 8080\n",
			"web.yaml:6: containers[0].ports: a list is needed: write [8080]"},
		{"a mapping for a list", "family: web\ncontainers:\n  name: app\n",
			`web.yaml:3: containers: a list is needed: start each item with "- "`},
		{"a list for a mapping", head + cmd + "    health_check:\n      - http: http://x\n",
			`web.yaml:7: containers[0].health_check: a mapping is needed, not a list: remove the "- "`},
		{"a string for a mapping", head + cmd + "    resources: big\n",
			`web.yaml:6: containers[0].resources: a mapping is needed, not "big" (Resources has: cpu_millis, memory_bytes)`},
		{"null in a list", head + "    command: [\"/bin/sleep\", ~]\n",
			"web.yaml:5: containers[0].command[1]: a list item cannot be null"},
		{"a revision", "family: web\nrevision: 3\ncontainers: []\n",
			"web.yaml:2: revision: is assigned at registration; leave it out"},
		{"no family", "containers: []\n", "web.yaml:1: family: is required: the name the revisions share"},
		{"a bad family", "containers: []\nfamily: Web\n",
			`web.yaml:2: family: "Web" is not a valid name: must be a lowercase DNS label (a-z, 0-9, '-', at most 63 characters)`},
		// What the server would refuse is refused first, at its line.
		{"no containers", "family: web\ncontainers: []\n", "web.yaml:2: containers: a task needs at least one container"},
		{"no command", head, "web.yaml:3: containers[0].command: is required by the exec driver: the program and its arguments"},
		{"a port past 65535", head + cmd + "    ports: [70000]\n", "web.yaml:6: containers[0].ports[0]: 70000 is not a port: 1 to 65535"},
		{"ports on the host's network", head + cmd + "ports: [{name: http, container_port: 8080}]\n",
			`web.yaml:6: ports: only with network "bridge": a task on the host's network listens on the host's ports itself (list them in its containers' ports)`},
		{"a host port past 65535", head + cmd + "network: bridge\nports:\n  - {name: http, container_port: 8080}\n  - {name: admin, container_port: 9901, host_port: 70000}\n",
			"web.yaml:9: ports[1].host_port: 70000 is out of range 0-65535 (0: a free port the agent picks)"},
		{"a container's ports in bridge", head + cmd + "    ports: [8080]\nnetwork: bridge\n",
			"web.yaml:6: containers[0].ports: a bridge task publishes its ports in the task's ports, not a container's: move them to ports (name, container_port, host_port)"},
		{"a bad duration", head + cmd + "    stop_timeout: soon\n", `web.yaml:6: containers[0].stop_timeout: "soon" is not a duration such as 30s or 5m`},
		{"not a mapping", "- a\n- b\n", "web.yaml:1: a task definition is a mapping with family and containers, not a list"},
		{"two documents", "family: a\n---\nfamily: b\n", "web.yaml:3: one task definition per file: this is a second document"},
		{"empty", "# nothing\n", "web.yaml: empty: a task definition has family, revision, containers, restart_policy, network, ports, mesh"},
		{"malformed", "family: web\ncontainers: [\n", "web.yaml:2: malformed YAML: did not find expected node content: the file ends first; is a bracket or a quote left open?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTaskDefinition([]byte(tc.in), "web.yaml", testTypes())
			if err == nil {
				t.Fatal("no error")
			}
			if err.Error() != tc.want || !errors.Is(err, cli.ErrSpec) {
				t.Fatalf("got  %v\nwant %s", err, tc.want)
			}
		})
	}
}

// A bridge task's network and ports are read from the file and checked
// as the server checks them.
func TestParseBridgeTaskDefinition(t *testing.T) {
	const in = `family: web
network: bridge
ports:
  - {name: http, container_port: 8080, host_port: 8080}
  - {name: dns, container_port: 53, protocol: udp}
containers:
  - {name: app, driver: exec, command: ["/bin/sleep", "100"]}
`
	spec, err := ParseTaskDefinition([]byte(in), "web.yaml", testTypes())
	if err != nil {
		t.Fatal(err)
	}
	td := spec.Definition
	if td.GetNetwork() != "bridge" || len(td.GetPorts()) != 2 || td.GetPorts()[0].GetHostPort() != 8080 || td.GetPorts()[1].GetProtocol() != "udp" {
		t.Fatalf("read %v", td)
	}
}

// Without the types (a client that does not know them) the file is still
// read and its shape checked; the server's own checks are the server's.
func TestParseTaskDefinitionWithoutTypes(t *testing.T) {
	if _, err := ParseTaskDefinition([]byte("family: web\ncontainers: []\n"), "f", nil); err != nil {
		t.Fatal(err)
	}
	_, err := ParseTaskDefinition([]byte("family: web\ncontainers: [{name: a, env: {PORT: 1}}]\n"), "f", nil)
	if fmt.Sprint(err) != `f:2: containers[0].env.PORT: a string is needed: quote it ("1")` {
		t.Fatal(err)
	}
}
