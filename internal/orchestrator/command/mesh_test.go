package command

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/orchestrator"
)

// meshTaskDef is the example mesh block on a bridge task.
const meshTaskDef = `family: web
network: bridge
ports:
  - {name: http, container_port: 8080}
containers:
  - {name: app, driver: exec, command: ["/bin/sleep", "100"]}
mesh:
  service: web
  port: 8080
  protocol: http
  upstreams:
    - {service: api, local_port: 9191}
  transparent: true
  tags: [v1]
  meta: {team: payments}
`

// Every refusal of a mesh block names the file, the line and the field as
// the file spells it: the shape's (unknown fields, wrong kinds) and the
// server's checks alike.
func TestParseMeshErrors(t *testing.T) {
	const head = "family: web\nnetwork: bridge\nports: [{name: http, container_port: 8080}]\ncontainers: [{name: app, driver: exec, command: [x]}]\n"
	for _, tc := range []struct{ name, in, want string }{
		{"an unknown field", head + "mesh:\n  port: 8080\n  prots: http\n",
			"web.yaml:7: mesh.prots: unknown field: did you mean port?"},
		{"an unknown field, nothing close", head + "mesh:\n  port: 8080\n  colour: red\n",
			"web.yaml:7: mesh.colour: unknown field (TaskMesh has: service, port, protocol, upstreams, transparent, tags, meta)"},
		{"an unknown upstream field", head + "mesh:\n  port: 8080\n  upstreams:\n    - service: api\n      local_port: 9191\n      datacenter: dc2\n",
			"web.yaml:10: mesh.upstreams[0].datacenter: unknown field (MeshUpstream has: service, namespace, local_port)"},
		{"a misspelt upstream field", head + "mesh:\n  port: 8080\n  upstreams: [{service: api, localport: 9191}]\n",
			"web.yaml:7: mesh.upstreams[0].localport: unknown field: did you mean local_port?"},
		{"a negative port", head + "mesh: {port: -1}\n",
			"web.yaml:5: mesh.port: -1 is out of range: a whole number from 0 to 4294967295 is needed"},
		{"a port past 65535", head + "mesh:\n  port: 65536\n",
			"web.yaml:6: mesh.port: 65536 is not a port: 1 to 65535"},
		{"no port", head + "mesh:\n  service: web\n",
			"web.yaml:5: mesh.port: is required: the port the app listens on inside the task, 1 to 65535"},
		{"a word for the protocol", head + "mesh:\n  port: 8080\n  protocol: http2\n",
			`web.yaml:7: mesh.protocol: "http2" is not a protocol: one of tcp, http, grpc (the default)`},
		{"a bad service", head + "mesh:\n  port: 8080\n  service: Web\n",
			`web.yaml:7: mesh.service: "Web" is not a valid name: must be a lowercase DNS label (a-z, 0-9, '-', at most 63 characters)`},
		{"a local port on the app's", head + "mesh:\n  port: 8080\n  upstreams:\n    - {service: api, local_port: 9191}\n    - {service: db, local_port: 8080}\n",
			"web.yaml:9: mesh.upstreams[1].local_port: 8080 is the app's port (mesh.port): the proxy cannot listen where the app does"},
		{"a local port on the proxy's", head + "mesh:\n  port: 8080\n  upstreams:\n    - service: api\n      local_port: 15001\n",
			"web.yaml:9: mesh.upstreams[0].local_port: 15001 is the proxy's transparent outbound port: pick another port"},
		{"two upstreams on one local port", head + "mesh:\n  port: 8080\n  upstreams:\n    - {service: api, local_port: 9191}\n    - {service: db, localPort: 9191}\n",
			"web.yaml:9: mesh.upstreams[1].localPort: 9191 is also the local port of upstreams[0]: each upstream needs its own"},
		{"transparent on the host's network", "family: web\ncontainers: [{name: app, driver: exec, command: [x]}]\nmesh:\n  port: 8080\n  transparent: true\n",
			`web.yaml:5: mesh.transparent: needs network "bridge": the redirect rules are written in the task's own network namespace, and a host task shares the instance's`},
		{"a YAML 1.1 boolean", head + "mesh:\n  port: 8080\n  transparent: yes\n",
			`web.yaml:7: mesh.transparent: true or false is needed: write true ("yes" is a string)`},
		{"a bad tag", head + "mesh:\n  port: 8080\n  tags:\n    - v1\n    - Blue Green\n",
			`web.yaml:9: mesh.tags[1]: "Blue Green" is not a tag: a lowercase DNS label (a-z, 0-9, '-', at most 63 characters), as DNS queries filter by it`},
		{"a bad meta key", head + "mesh:\n  port: 8080\n  meta:\n    team: payments\n    cost center: \"7\"\n",
			`web.yaml:9: mesh.meta["cost center"]: "cost center" is not a meta key: letters, digits, '_' and '-'`},
		{"a number for a meta value", head + "mesh:\n  port: 8080\n  meta: {build: 42}\n",
			`web.yaml:7: mesh.meta.build: a string is needed: quote it ("42")`},
		{"a reserved meta key", head + "mesh:\n  port: 8080\n  meta:\n    trellis-task: x\n",
			`web.yaml:8: mesh.meta.trellis-task: keys beginning "trellis-" are set by Trellis`},
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

// The mesh block reads the same from YAML and JSON (protojson's camelCase
// names too).
func TestParseMesh(t *testing.T) {
	fromYAML, err := ParseTaskDefinition([]byte(meshTaskDef), "web.yaml", testTypes())
	if err != nil {
		t.Fatal(err)
	}
	const js = `{"family": "web", "network": "bridge", "ports": [{"name": "http", "container_port": 8080}],
	 "containers": [{"name": "app", "driver": "exec", "command": ["/bin/sleep", "100"]}],
	 "mesh": {"service": "web", "port": 8080, "protocol": "http", "upstreams": [{"service": "api", "localPort": 9191}],
	          "transparent": true, "tags": ["v1"], "meta": {"team": "payments"}}}`
	fromJSON, err := ParseTaskDefinition([]byte(js), "web.json", testTypes())
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(fromYAML.Definition, fromJSON.Definition) {
		t.Fatalf("YAML and JSON differ:\n%v\n%v", fromYAML.Definition, fromJSON.Definition)
	}
	want := &pborch.TaskMesh{Service: "web", Port: 8080, Protocol: "http", Upstreams: []*pborch.MeshUpstream{{Service: "api", LocalPort: 9191}},
		Transparent: true, Tags: []string{"v1"}, Meta: map[string]string{"team": "payments"}}
	if !proto.Equal(fromYAML.Definition.GetMesh(), want) {
		t.Fatalf("read %v", fromYAML.Definition.GetMesh())
	}
}

// A mesh block goes from a YAML file through registration to the store
// with its defaults filled, and taskdef show gives it back, as a table and
// as the stored data. Registering it on a family that has a revision
// without one makes a new revision (a revision never changes); the same
// file again registers nothing.
func TestMeshRoundTrip(t *testing.T) {
	api, addr := testServer(t)
	taskdef := func(args ...string) string {
		t.Helper()
		out, err := runTrellis(addr, func(e *cli.Env) *cobra.Command { return newTaskDefCmd(e, testTypes()) }, append([]string{"taskdef"}, args...)...)
		if err != nil {
			t.Fatalf("taskdef %v: %v\n%s", args, err, out)
		}
		return out
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain := write("plain.yaml", "family: web\nnetwork: bridge\nports:\n  - {name: http, container_port: 8080}\ncontainers:\n  - {name: app, driver: exec, command: [\"/bin/sleep\", \"100\"]}\n")
	if out := taskdef("register", "-f", plain); !strings.Contains(out, "registered web:1") {
		t.Fatalf("register plain: %s", out)
	}
	if out := taskdef("show", "web:1"); strings.Contains(out, "Mesh") {
		t.Fatalf("a definition without a mesh block shows one:\n%s", out)
	}

	// The defaults are left out of the file: the server fills them.
	meshed := write("web.yaml", strings.NewReplacer("  service: web\n", "", "  protocol: http\n", "").Replace(meshTaskDef))
	if out := taskdef("register", "-f", meshed); !strings.Contains(out, "registered web:2") {
		t.Fatalf("register with a mesh block: %s", out)
	}
	if out := taskdef("register", "-f", meshed); !strings.Contains(out, "web:2 is already this definition: nothing registered") {
		t.Fatalf("register the same again: %s", out)
	}
	r, err := api.Read(t.Context(), &pbresource.ReadRequest{Id: orchestrator.TaskDefinitionID("default", "web", 2)})
	if err != nil {
		t.Fatal(err)
	}
	var stored pborch.TaskDefinition
	if err := r.GetResource().GetData().UnmarshalTo(&stored); err != nil {
		t.Fatal(err)
	}
	want := &pborch.TaskMesh{Service: "web", Port: 8080, Protocol: "tcp", Upstreams: []*pborch.MeshUpstream{{Service: "api", LocalPort: 9191}},
		Transparent: true, Tags: []string{"v1"}, Meta: map[string]string{"team": "payments"}}
	if !proto.Equal(stored.GetMesh(), want) {
		t.Fatalf("stored %v\nwant   %v", stored.GetMesh(), want)
	}

	out := taskdef("show", "web")
	for _, line := range []string{
		"Task definition web:2 (namespace default)",
		"Mesh: service web, app port 8080, protocol tcp",
		"  Outbound:   transparent (all outbound TCP through the proxy)",
		"  Tags:       v1",
		"  Meta:       team=payments",
		"UPSTREAM   NAMESPACE      LOCAL ADDRESS",
		"api        (the task's)   127.0.0.1:9191",
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("taskdef show lacks %q:\n%s", line, out)
		}
	}

	// -o json is the stored resource: the block decodes back to it.
	out = taskdef("show", "web:2", "-o", "json")
	var shown wire.Resource
	if err := json.Unmarshal([]byte(out), &shown); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var td pborch.TaskDefinition
	if err := cli.DecodeData(&shown, &td); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(td.GetMesh(), want) {
		t.Fatalf("-o json gives %v", td.GetMesh())
	}
	// -o yaml names the fields as the file does.
	out = taskdef("show", "web:2", "-o", "yaml")
	for _, s := range []string{"mesh:", "local_port: 9191", "transparent: true", "team: payments"} {
		if !strings.Contains(out, s) {
			t.Errorf("-o yaml lacks %q:\n%s", s, out)
		}
	}
}

// The mesh example of docs/tasks.md registers as it is written.
func TestMeshDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/tasks.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n# web-mesh.yaml\n")
	example, _, closed := strings.Cut(rest, "```")
	if !ok || !closed {
		t.Fatal("docs/tasks.md has no web-mesh.yaml example")
	}
	spec, err := ParseTaskDefinition([]byte(example), "web-mesh.yaml", testTypes())
	if err != nil {
		t.Fatal(err)
	}
	m := spec.Definition.GetMesh()
	if m.GetPort() != 8080 || len(m.GetUpstreams()) != 1 || !m.GetTransparent() {
		t.Fatalf("read %v", m)
	}
}

// A write through the generic HTTP API, which skips the CLI's reading of
// the file, meets the same checks on the server: a bad mesh block is
// refused naming its field, and nothing is stored.
func TestMeshRefusedThroughTheGenericAPI(t *testing.T) {
	api, addr := testServer(t)
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	ref := client.Ref{Type: taskDefWire, Namespace: "default", Name: "web-1"}
	for _, data := range []string{
		`{"family": "web", "revision": 1, "containers": [{"name": "app", "driver": "exec", "command": ["x"]}], "mesh": {"port": 8080, "transparent": true}}`,
		`{"family": "web", "revision": 1, "network": "bridge", "containers": [{"name": "app", "driver": "exec", "command": ["x"]}], "mesh": {"port": 8080, "upstreams": [{"service": "api", "local_port": 15000}]}}`,
		`{"family": "web", "revision": 1, "containers": [{"name": "app", "driver": "exec", "command": ["x"]}], "mesh": {"port": 8080, "prots": "http"}}`,
	} {
		_, err := c.Write(t.Context(), ref, wire.WriteRequest{Data: json.RawMessage(data)})
		if !client.IsCode(err, wire.CodeInvalidArgument) || !strings.Contains(err.Error(), "data.mesh") {
			t.Errorf("write %s: %v", data, err)
		}
	}
	list, err := api.List(t.Context(), &pbresource.ListRequest{Type: orchestrator.TaskDefinitionType, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
	if err != nil || len(list.GetResources()) != 0 {
		t.Fatalf("stored after refusals: %v %v", list.GetResources(), err)
	}
}
