package command

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/cli"
	schedclient "trellis.dev/trellis/internal/scheduler/client"
)

const envSpec = `name: log-shipper
type: daemon
task_definition: log-shipper:3
instance_group:
  cluster: default
  attributes: ["role=logger", "zone in (a,b)"]
deployment:
  min_healthy_percent: 75
  min_healthy_time: 10s
  healthy_deadline: 5m
  progress_deadline: 10m
  auto_rollback: true
`

func TestParseEnvironmentSpec(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"the issue's spec", envSpec, `{"name":"log-shipper","type":"daemon","task_definition":"log-shipper:3",` +
			`"instance_group":{"cluster":"default","attributes":["role=logger","zone in (a,b)"]},` +
			`"deployment":{"min_healthy_percent":75,"min_healthy_time":"10s","healthy_deadline":"5m","progress_deadline":"10m","auto_rollback":true}}`},
		{"JSON", `{"name": "a", "task_definition": "a:1"}`, `{"name":"a","task_definition":"a:1"}`},
		{"no name: the command line gives it", "task_definition: a:1\n", `{"task_definition":"a:1"}`},
		{"a given zero and an empty filter list are kept", "task_definition: a:1\ninstance_group: {attributes: []}\ndeployment: {min_healthy_percent: 0, auto_rollback: false}\n",
			`{"task_definition":"a:1","instance_group":{"attributes":[]},"deployment":{"min_healthy_percent":0,"auto_rollback":false}}`},
		{"a leading --- and comments", "# the shipper\n---\nname: a\ntask_definition: a:1\n", `{"name":"a","task_definition":"a:1"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := ParseEnvironmentSpec([]byte(tc.in), "f.yaml")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(spec)
			if string(b) != tc.want {
				t.Fatalf("got  %s\nwant %s", b, tc.want)
			}
		})
	}
}

func TestParseEnvironmentSpecErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "f.yaml: empty: an environment spec has name, type, task_definition, instance_group, deployment, role"},
		{"two documents", "name: a\n---\nname: b\n", "f.yaml:3: one environment per file: this is a second document"},
		{"not a mapping", "- a\n- b\n", "f.yaml:1: an environment spec is a mapping with name, type, task_definition, instance_group, deployment, role, not a list"},
		{"bad YAML", "name: a\ndeployment: {min_healthy_percent: [\n", "f.yaml:2: malformed YAML: did not find expected node content: the file ends first; is a bracket or a quote left open?"},
		{"unknown top field", "name: a\ntaskdef: a:1\n", "f.yaml:2: taskdef: unknown field: did you mean task_definition?"},
		{"unknown field, nothing close", "name: a\ncolour: red\n", "f.yaml:2: colour: unknown field (an environment spec has: name, type, task_definition, instance_group, deployment, role)"},
		{"unknown nested field", "name: a\ndeployment:\n  min_healty_percent: 50\n", "f.yaml:3: deployment.min_healty_percent: unknown field: did you mean min_healthy_percent?"},
		{"camelCase is not a spec name", "name: a\ndeployment: {minHealthyPercent: 50}\n", "f.yaml:2: deployment.minHealthyPercent: unknown field: did you mean min_healthy_percent?"},
		{"unknown group field", "name: a\ninstance_group: {filters: [a]}\n", "f.yaml:2: instance_group.filters: unknown field (instance_group has: cluster, attributes)"},
		{"group not a mapping", "name: a\ninstance_group: [a]\n", `f.yaml:2: instance_group: a mapping is needed, not a list (instance_group has: cluster, attributes)`},
		{"wrong type", "name: a\ndeployment: {min_healthy_percent: lots}\n", `f.yaml:2: deployment.min_healthy_percent: a whole number is needed, not "lots"`},
		{"attributes not a list", "name: a\ninstance_group: {attributes: role=logger}\n", `f.yaml:2: instance_group.attributes: a list is needed: write ["role=logger"]`},
		{"a YAML 1.1 boolean", "name: a\ndeployment:\n  auto_rollback: yes\n", `f.yaml:3: deployment.auto_rollback: true or false is needed: write true ("yes" is a string)`},
		{"auto_rollback not a bool", "name: a\ndeployment: {auto_rollback: sometimes}\n", `f.yaml:2: deployment.auto_rollback: true or false is needed, not "sometimes"`},
		{"a name that is a boolean", "name: true\n", `f.yaml:1: name: a string is needed: quote it ("true")`},
		{"a quoted number", "name: a\ndeployment: {min_healthy_percent: \"50\"}\n", "f.yaml:2: deployment.min_healthy_percent: a whole number is needed: write it without quotes (50)"},
		{"a fraction", "name: a\ndeployment: {min_healthy_percent: 50.0}\n", "f.yaml:2: deployment.min_healthy_percent: a whole number is needed, not 50.0"},
		{"percent out of range", "name: a\ndeployment:\n  min_healthy_percent: 150\n", "f.yaml:3: deployment.min_healthy_percent: 150 is outside 0-100"},
		{"negative percent", "name: a\ndeployment: {min_healthy_percent: -1}\n", "f.yaml:2: deployment.min_healthy_percent: -1 is outside 0-100"},
		{"percent past int32", "name: a\ndeployment: {min_healthy_percent: 3000000000}\n", "f.yaml:2: deployment.min_healthy_percent: 3000000000 is out of range: a whole number from -2147483648 to 2147483647 is needed"},
		{"duration without unit", "name: a\ndeployment:\n  min_healthy_time: 10\n", `f.yaml:3: deployment.min_healthy_time: a duration is needed: write it with a unit, like "10s"`},
		{"bad duration", "name: a\ndeployment:\n  healthy_deadline: soon\n", `f.yaml:3: deployment.healthy_deadline: "soon" is not a duration: write it with a unit, like 10s or 5m`},
		{"negative duration", "name: a\ndeployment: {progress_deadline: -5m}\n", `f.yaml:2: deployment.progress_deadline: "-5m" is negative`},
		{"not a type", "name: a\ntype: service\n", `f.yaml:2: type: "service" is not a type of environment (the only one is "daemon")`},
		{"task definition without revision", "name: a\ntask_definition: web\n", `f.yaml:2: task_definition: "web" names no revision: write family:revision, like web:1`},
		{"bad task definition", "name: a\ntask_definition: \"Web App:1\"\n", `f.yaml:2: task_definition: "Web App:1" is not family:revision`},
		{"empty filter", "name: a\ninstance_group:\n  attributes:\n    - role=logger\n    - \"\"\n", "f.yaml:5: instance_group.attributes[1]: is empty: write key=value, key!=value, key, !key, key in (a,b) or key notin (a,b)"},
		{"malformed filter", "name: a\ninstance_group: {attributes: [\"zone in (a,b\"]}\n", `f.yaml:2: instance_group.attributes[0]: "zone in (a,b": the values must be in parentheses`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseEnvironmentSpec([]byte(tc.in), "f.yaml")
			if err == nil || !errors.Is(err, cli.ErrSpec) || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("got  %v\nwant %s", err, tc.want)
			}
		})
	}
}

func TestEnvironmentFlags(t *testing.T) {
	p50, p150, yes := int32(50), int32(150), true
	for _, tc := range []struct {
		name  string
		flags EnvironmentFlags
		want  string // the spec's JSON, or "error: ..."
	}{
		{"task definition only", EnvironmentFlags{TaskDefinition: "ls:3"}, `{"name":"ls","type":"daemon","task_definition":"ls:3"}`},
		{"everything", EnvironmentFlags{TaskDefinition: "ls:3", Cluster: "edge", Attributes: []string{"role=logger", "zone in (a,b)"},
			MinHealthyPercent: &p50, MinHealthyTime: "10s", HealthyDeadline: "5m", ProgressDeadline: "10m", AutoRollback: &yes},
			`{"name":"ls","type":"daemon","task_definition":"ls:3","instance_group":{"cluster":"edge","attributes":["role=logger","zone in (a,b)"]},` +
				`"deployment":{"min_healthy_percent":50,"min_healthy_time":"10s","healthy_deadline":"5m","progress_deadline":"10m","auto_rollback":true}}`},
		{"no task definition", EnvironmentFlags{Cluster: "edge"}, "error: --taskdef: required"},
		{"percent names the flag", EnvironmentFlags{TaskDefinition: "ls:3", MinHealthyPercent: &p150}, "error: --min-healthy-percent: 150 is outside 0-100"},
		{"duration names the flag", EnvironmentFlags{TaskDefinition: "ls:3", HealthyDeadline: "5"}, `error: --healthy-deadline: "5" is not a duration`},
		{"taskdef names the flag", EnvironmentFlags{TaskDefinition: "ls"}, `error: --taskdef: "ls" names no revision`},
		{"empty filter names the flag", EnvironmentFlags{TaskDefinition: "ls:3", Attributes: []string{""}}, "error: --attribute: is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := tc.flags.CreateSpec("ls")
			got := ""
			if err != nil {
				got = "error: " + err.Error()
			} else {
				b, _ := json.Marshal(spec)
				got = string(b)
			}
			if !strings.HasPrefix(got, tc.want) {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// An update by flags sends the current spec with the flags over it.
func TestEnvironmentFlagsUpdate(t *testing.T) {
	p75 := int32(75)
	current := &pbscheduler.Environment{
		Type: "daemon", TaskDefinition: "ls:3",
		InstanceGroup: &pbscheduler.InstanceGroup{Cluster: "default", Attributes: []string{"role=logger"}},
		Deployment:    &pbscheduler.DeploymentConfig{MinHealthyPercent: &p75, MinHealthyTime: "10s"},
	}
	p0 := int32(0)
	for _, tc := range []struct {
		name  string
		flags EnvironmentFlags
		want  string
	}{
		{"new task definition", EnvironmentFlags{TaskDefinition: "ls:4"}, `{"name":"ls","type":"daemon","task_definition":"ls:4",` +
			`"instance_group":{"cluster":"default","attributes":["role=logger"]},"deployment":{"min_healthy_percent":75,"min_healthy_time":"10s","auto_rollback":false}}`},
		{"percent to zero, cluster kept with new filters", EnvironmentFlags{MinHealthyPercent: &p0, Attributes: []string{"zone=a"}}, `{"name":"ls","type":"daemon","task_definition":"ls:3",` +
			`"instance_group":{"cluster":"default","attributes":["zone=a"]},"deployment":{"min_healthy_percent":0,"min_healthy_time":"10s","auto_rollback":false}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := tc.flags.UpdateSpec("ls", current)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(spec)
			if string(b) != tc.want {
				t.Fatalf("got  %s\nwant %s", b, tc.want)
			}
		})
	}
	if current.GetInstanceGroup().GetAttributes()[0] != "role=logger" {
		t.Fatal("UpdateSpec changed the current environment")
	}
}

func TestCheckSpecName(t *testing.T) {
	for _, tc := range []struct{ file, arg, want string }{
		{"a", "", "a"}, {"", "a", "a"}, {"a", "a", "a"},
		{"", "", `error: f: name: required`}, {"a", "b", `error: f: name: "a", but the command names "b"`},
	} {
		spec := &schedclient.EnvironmentSpec{Name: tc.file}
		got := ""
		if err := CheckSpecName(spec, tc.arg, "f"); err != nil {
			got = "error: " + err.Error()
		} else {
			got = spec.Name
		}
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("file %q arg %q: %s, want %s", tc.file, tc.arg, got, tc.want)
		}
	}
}

func TestParseVersionArg(t *testing.T) {
	for _, ok := range []string{"", "1", "42", "3f2504e0-4f89-11d3-9a0c-0305e82c3301"} {
		if err := ParseVersionArg(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"0", "-1", "latest", "3f2504e0-4f89-11d3-9a0c-0305e82c330", "v3"} {
		if err := ParseVersionArg(bad); err == nil || !strings.HasPrefix(err.Error(), "--version: ") {
			t.Errorf("%q: %v, want a --version error", bad, err)
		}
	}
}
