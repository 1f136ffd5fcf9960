package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
)

func TestProgressLine(t *testing.T) {
	for _, tc := range []struct {
		d    *pbscheduler.Deployment
		want string
	}{
		{&pbscheduler.Deployment{Status: "pending", Total: 5}, "pending: 0/5 complete"},
		{&pbscheduler.Deployment{Status: "in-progress", Total: 5, Complete: 2}, "in-progress: 2/5 complete"},
		{&pbscheduler.Deployment{Status: "in-progress", Total: 5, Complete: 2, Failed: 1, StatusReason: "batch 2"}, "in-progress: 2/5 complete, 1 failed"},
		{&pbscheduler.Deployment{Status: "completed", Total: 5, Complete: 5, StatusReason: "all healthy"}, "completed: 5/5 complete"},
		{&pbscheduler.Deployment{Status: "unhealthy", Total: 5, Complete: 3, Failed: 1, StatusReason: "task t1 on node-4 not healthy within 5m"},
			"unhealthy: 3/5 complete, 1 failed (task t1 on node-4 not healthy within 5m)"},
		{&pbscheduler.Deployment{}, "-: 0/0 complete"},
		// Before the scheduler's first plan: no 0/0.
		{&pbscheduler.Deployment{Status: "pending"}, "pending: waiting to start"},
		{&pbscheduler.Deployment{Status: "in-progress"}, "in-progress: planning"},
		// An environment that matches no instance completes as 0/0.
		{&pbscheduler.Deployment{Status: "completed"}, "completed: 0/0 complete"},
	} {
		if got := ProgressLine(tc.d); got != tc.want {
			t.Errorf("ProgressLine = %q, want %q", got, tc.want)
		}
	}
	if !DeploymentRunning(&pbscheduler.Deployment{Status: "pending"}) || DeploymentRunning(&pbscheduler.Deployment{Status: "stopped"}) {
		t.Error("DeploymentRunning")
	}
}

func TestSummary(t *testing.T) {
	server := &pbscheduler.EnvironmentState{Desired: 5, Active: 2, Launching: 3, Unhealthy: 1, Summary: "5 desired: 2 active, 3 launching, 1 unhealthy"}
	if got := Summary(server); got != server.Summary {
		t.Errorf("the server's summary is not kept: %q", got)
	}
	server.Summary = ""
	if got, want := Summary(server), "5 desired: 2 active, 3 launching, 1 unhealthy"; got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
	if got, want := Summary(&pbscheduler.EnvironmentState{Desired: 3, Active: 3, Stopping: 1}), "3 desired: 3 active, 0 launching, 0 unhealthy, 1 stopping"; got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
}

// checkLines compares rendered output with want line by line, ignoring
// trailing spaces (tabwriter pads the last column of some rows).
func checkLines(t *testing.T, got, want string) {
	t.Helper()
	var g []string
	for _, l := range strings.Split(got, "\n") {
		g = append(g, strings.TrimRight(l, " "))
	}
	if strings.Join(g, "\n") != want {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(g, "\n"), want)
	}
}

func TestWriteEnvironmentStatus(t *testing.T) {
	st := &pbscheduler.EnvironmentState{
		Desired: 3, Active: 1, Launching: 1, Unhealthy: 1, Summary: "3 desired: 1 active, 1 launching, 1 unhealthy",
		Versions: []*pbscheduler.VersionCount{
			{TaskDefinition: "ls:4", VersionNumber: 2, Tasks: 2, Healthy: 1},
			{TaskDefinition: "ls:3", VersionNumber: 1, Tasks: 2, Healthy: 1},
		},
		Instances: []*pbscheduler.InstanceState{
			{Instance: "node-1", Matches: true, Task: "t1", TaskDefinition: "ls:4", VersionNumber: 2, State: "active", Health: "HEALTHY"},
			{Instance: "node-2", Matches: true, Task: "t2", TaskDefinition: "ls:4", VersionNumber: 2, State: "launching"},
			{Instance: "node-3", Matches: true, Task: "t3", TaskDefinition: "ls:3", VersionNumber: 1, State: "unhealthy", Health: "UNHEALTHY"},
			{Instance: "node-4", Matches: false, Task: "t4", TaskDefinition: "ls:3", VersionNumber: 1, State: "stopping", Health: "HEALTHY"},
			{Instance: "node-5", Matches: true, State: "missing"},
		},
	}
	var b bytes.Buffer
	if err := WriteEnvironmentStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	checkLines(t, b.String(), `3 desired: 1 active, 1 launching, 1 unhealthy

VERSION   TASKDEF   TASKS   HEALTHY
2         ls:4      2       1
1         ls:3      2       1

INSTANCE   VERSION   TASKDEF   TASK   STATE                          HEALTH
node-1     2         ls:4      t1     active                         HEALTHY
node-2     2         ls:4      t2     launching                      -
node-3     1         ls:3      t3     unhealthy                      UNHEALTHY
node-4     1         ls:3      t4     stopping (no longer matches)   HEALTHY
node-5     -         -         -      missing                        -
`)
	b.Reset()
	_ = WriteEnvironmentStatus(&b, &pbscheduler.EnvironmentState{Summary: "0 desired: 0 active"})
	checkLines(t, b.String(), "0 desired: 0 active\n\nNo instance matches the instance group.\n")
}

func TestWriteDiff(t *testing.T) {
	d := &pbscheduler.EnvironmentDiff{
		Version: "3f2504e0-4f89-11d3-9a0c-0305e82c3301", VersionNumber: 2, TaskDefinition: "ls:4",
		Place: 1, Replace: 1, Stop: 1, Keep: 1,
		Changes: []*pbscheduler.InstanceChange{
			{Instance: "node-1", Action: "place", ToTaskDefinition: "ls:4", Reason: "no task"},
			{Instance: "node-2", Action: "replace", FromTaskDefinition: "ls:3", ToTaskDefinition: "ls:4"},
			{Instance: "node-3", Action: "stop", FromTaskDefinition: "ls:3", Reason: "draining"},
			{Instance: "node-4", Action: "keep", FromTaskDefinition: "ls:4", ToTaskDefinition: "ls:4"},
		},
	}
	var b bytes.Buffer
	if err := WriteDiff(&b, d); err != nil {
		t.Fatal(err)
	}
	checkLines(t, b.String(), `Deploying version 2 (3f2504e0-4f89-11d3-9a0c-0305e82c3301, ls:4) would place 1, replace 1, stop 1, keep 1.

INSTANCE   ACTION    FROM   TO     REASON
node-1     place     -      ls:4   no task
node-2     replace   ls:3   ls:4   -
node-3     stop      ls:3   -      draining
node-4     keep      ls:4   ls:4   -
`)
	b.Reset()
	_ = WriteDiff(&b, &pbscheduler.EnvironmentDiff{VersionNumber: 1, TaskDefinition: "ls:3"})
	checkLines(t, b.String(), "Deploying version 1 (ls:3) would place 0, replace 0, stop 0, keep 0.\nNo instance matches the instance group, and no task runs: nothing to do.\n")
}

func TestWriteEnvironments(t *testing.T) {
	var b bytes.Buffer
	err := WriteEnvironments(&b, []NamedEnvironment{
		{"log-shipper", &pbscheduler.Environment{Type: "daemon", Status: "active", Health: "healthy", TaskDefinition: "ls:4", VersionCount: 2, ActiveDeployment: "d2"}},
		{"exporter", &pbscheduler.Environment{Type: "daemon", Status: "inactive", TaskDefinition: "ne:1", VersionCount: 1}},
		{"old", &pbscheduler.Environment{Type: "daemon", Status: "active", Deleting: true, TaskDefinition: "old:1", VersionCount: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkLines(t, b.String(), `NAME          TYPE     STATUS     HEALTH    TASKDEF   VERSIONS   DEPLOYING
log-shipper   daemon   active     healthy   ls:4      2          d2
exporter      daemon   inactive   -         ne:1      1          -
old           daemon   deleting   -         old:1     1          -
`)
}

func TestWriteEnvironment(t *testing.T) {
	p := int32(50)
	v := EnvironmentView{
		Name: "ls", Namespace: "default",
		Env: &pbscheduler.Environment{
			Type: "daemon", TaskDefinition: "ls:4", Status: "active", Health: "healthy",
			InstanceGroup: &pbscheduler.InstanceGroup{Attributes: []string{"role=logger", "zone in (a,b)"}},
			Deployment:    &pbscheduler.DeploymentConfig{MinHealthyPercent: &p, MinHealthyTime: "10s", AutoRollback: true},
			LatestVersion: "v2", DesiredVersion: "v1", DesiredTaskDefinition: "ls:3", VersionCount: 2, ActiveDeployment: "d2",
		},
		State:    &pbscheduler.EnvironmentState{Summary: "2 desired: 1 active, 1 launching"},
		ActiveID: "d2",
		Active:   &pbscheduler.Deployment{Status: "in-progress", VersionNumber: 2, Total: 2, Complete: 1},
	}
	var b bytes.Buffer
	if err := WriteEnvironment(&b, v); err != nil {
		t.Fatal(err)
	}
	checkLines(t, b.String(), `Environment:       ls
Namespace:         default
Type:              daemon
Status:            active
Health:            healthy
Task definition:   ls:4
Instance group:    cluster default, role=logger, zone in (a,b)
Deployment:        min healthy 50%, healthy for 10s, healthy deadline 5m, progress deadline 10m, auto rollback
Latest version:    2 (v2)
Desired version:   v1 (ls:3)
Deploying:         d2, version 2, in-progress: 1/2 complete
Tasks:             2 desired: 1 active, 1 launching
`)
	b.Reset()
	_ = WriteEnvironment(&b, EnvironmentView{Name: "new", Env: &pbscheduler.Environment{Type: "daemon", Status: "inactive", TaskDefinition: "n:1", LatestVersion: "v1", VersionCount: 1}})
	if !strings.Contains(b.String(), "Desired version:   none: never deployed (trellis deploy new)") ||
		!strings.Contains(b.String(), "Deploying:         nothing") ||
		!strings.Contains(b.String(), "min healthy 75%, healthy for 0s, healthy deadline 5m, progress deadline 10m\n") {
		t.Fatalf("never deployed:\n%s", b.String())
	}
}

func TestWriteDeployments(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var b bytes.Buffer
	err := WriteDeployments(&b, []NamedDeployment{
		{"d2", &pbscheduler.Deployment{Type: "user", VersionNumber: 2, TaskDefinition: "ls:4", Status: "in-progress", Total: 4, Complete: 1, CreatedAt: timestamppb.New(now.Add(-30 * time.Second))}},
		{"d1", &pbscheduler.Deployment{Type: "user", VersionNumber: 1, TaskDefinition: "ls:3", Status: "completed", Total: 4, Complete: 4, CreatedAt: timestamppb.New(now.Add(-10 * time.Minute))}},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	checkLines(t, b.String(), `ID   TYPE   VERSION   TASKDEF   STATUS        PROGRESS       AGE
d2   user   2         ls:4      in-progress   1/4 complete   30s
d1   user   1         ls:3      completed     4/4 complete   10m
`)
}

func TestWriteDeployment(t *testing.T) {
	d := &pbscheduler.Deployment{
		Environment: "ls", Version: "v2", VersionNumber: 2, TaskDefinition: "ls:4", Type: "user", Status: "in-progress",
		Total: 5, Complete: 2, BatchSize: 2,
		Instances: []*pbscheduler.InstanceProgress{
			{Instance: "node-3", State: "starting", Task: "t3"},
			{Instance: "node-4", State: "stopping", Task: "t4", Reason: "replacing ls:3"},
		},
	}
	var b bytes.Buffer
	if err := WriteDeployment(&b, "d2", d); err != nil {
		t.Fatal(err)
	}
	checkLines(t, b.String(), `Deployment:    d2
Environment:   ls
Type:          user
Version:       2 (v2, ls:4)
Status:        in-progress
Progress:      2/5 complete
Batch size:    2
Created:       -

2 of the 3 instances not yet complete:
INSTANCE   STATE      TASK   REASON
node-3     starting   t3     -
node-4     stopping   t4     replacing ls:3
`)
}

func TestDescribeVersion(t *testing.T) {
	for _, tc := range []struct {
		n           int64
		id, td, out string
	}{{3, "u", "", "3 (u)"}, {0, "u", "w:3", "u (w:3)"}, {3, "u", "w:3", "3 (u, w:3)"}, {3, "", "", "3"}, {0, "", "", "-"}} {
		if got := describeVersion(tc.n, tc.id, tc.td); got != tc.out {
			t.Errorf("describeVersion(%d, %q, %q) = %q, want %q", tc.n, tc.id, tc.td, got, tc.out)
		}
	}
}
