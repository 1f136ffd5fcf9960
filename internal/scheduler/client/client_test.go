package client

import (
	"encoding/json"
	"net/url"
	"testing"

	apiclient "trellis.dev/trellis/internal/client"
)

// An update sends only what was given: absent fields are left out, while a
// zero that was given (min_healthy_percent 0, auto_rollback false, an
// empty filter list) is sent.
func TestEnvironmentSpecJSON(t *testing.T) {
	zero, no := int32(0), false
	for _, tc := range []struct {
		name string
		spec EnvironmentSpec
		want string
	}{
		{"only the task definition", EnvironmentSpec{TaskDefinition: "ls:3"}, `{"task_definition":"ls:3"}`},
		{"given zeros are sent", EnvironmentSpec{
			TaskDefinition: "ls:3",
			InstanceGroup:  &InstanceGroupSpec{Attributes: []string{}},
			Deployment:     &DeploymentSettings{MinHealthyPercent: &zero, AutoRollback: &no},
		}, `{"task_definition":"ls:3","instance_group":{"attributes":[]},"deployment":{"min_healthy_percent":0,"auto_rollback":false}}`},
		{"whole", EnvironmentSpec{
			Name: "ls", Type: "daemon", TaskDefinition: "ls:3",
			InstanceGroup: &InstanceGroupSpec{Cluster: "default", Attributes: []string{"zone in (a,b)"}},
			Deployment:    &DeploymentSettings{MinHealthyTime: "10s", HealthyDeadline: "5m", ProgressDeadline: "10m"},
		}, `{"name":"ls","type":"daemon","task_definition":"ls:3","instance_group":{"cluster":"default","attributes":["zone in (a,b)"]},"deployment":{"min_healthy_time":"10s","healthy_deadline":"5m","progress_deadline":"10m"}}`},
	} {
		b, err := json.Marshal(tc.spec)
		if err != nil || string(b) != tc.want {
			t.Errorf("%s: %s, %v\nwant %s", tc.name, b, err, tc.want)
		}
	}
}

func TestEnvironmentURL(t *testing.T) {
	hc, err := apiclient.New("http://h:1/base")
	if err != nil {
		t.Fatal(err)
	}
	c := New(hc)
	got := c.environmentURL("prod", "a/b", "/diff", url.Values{"version": {"3"}})
	if want := "http://h:1/base/v1/environments/a%2Fb/diff?namespace=prod&version=3"; got != want {
		t.Fatalf("environmentURL = %s, want %s", got, want)
	}
	if got, want := c.environmentURL("", "", "", nil), "http://h:1/base/v1/environments"; got != want {
		t.Fatalf("environmentURL = %s, want %s", got, want)
	}
}
