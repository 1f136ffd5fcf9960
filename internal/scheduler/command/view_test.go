package command

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
)

func TestProgressLine(t *testing.T) {
	nothing := "nothing placed: no instance of the instance group (cluster default, role=logger) is ready (3 down: i1, i2, i3); the version is placed on each one that becomes ready"
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
		// auto_rollback followed it: the line says where it went.
		{&pbscheduler.Deployment{Status: "unhealthy", Total: 5, Complete: 3, Failed: 1, StatusReason: "task t1 stopped", RollbackDeployment: "d3", RollbackVersionNumber: 1},
			"unhealthy: 3/5 complete, 1 failed (task t1 stopped); rolled back to version 1 (deployment d3)"},
		{&pbscheduler.Deployment{Status: "timed-out", Total: 2, StatusReason: "no task became healthy", RollbackDeployment: "d3", RollbackVersionNumber: 4},
			"timed-out: 0/2 complete (no task became healthy); rolled back to version 4 (deployment d3)"},
		// Before the scheduler's first plan: no 0/0.
		{&pbscheduler.Deployment{Status: "pending"}, "pending: waiting to start"},
		{&pbscheduler.Deployment{Status: "in-progress"}, "in-progress: planning"},
		// Completed with no instance to place on: never "0/0 complete",
		// and the server's reason says why.
		{&pbscheduler.Deployment{Status: "completed", StatusReason: nothing}, "completed: " + nothing},
		{&pbscheduler.Deployment{Status: "completed", StatusReason: "0/0 complete"}, "completed: nothing placed: no instance of the instance group was ready"},
		{&pbscheduler.Deployment{Status: "canceled", StatusReason: "replaced by deployment d4"}, "canceled: nothing placed (replaced by deployment d4)"},
		{&pbscheduler.Deployment{}, "-: nothing placed"},
		// Instances it could not place on: counted, and why, once it ends.
		{&pbscheduler.Deployment{Status: "in-progress", Total: 2, Complete: 1, Blocked: 1,
			Instances: []*pbscheduler.InstanceProgress{{Instance: "i2", State: "blocked", Reason: "host port 8080/tcp is taken by task t9"}}},
			"in-progress: 1/2 complete, 1 blocked"},
		{&pbscheduler.Deployment{Status: "completed", Total: 2, Complete: 2, Blocked: 1, StatusReason: "2/2 complete; 1 instance blocked (...)",
			Instances: []*pbscheduler.InstanceProgress{{Instance: "i2", State: "blocked", Reason: "host port 8080/tcp is taken by task t9"}}},
			"completed: 2/2 complete, 1 blocked (i2: host port 8080/tcp is taken by task t9)"},
		{&pbscheduler.Deployment{Status: "completed", Blocked: 1, StatusReason: "nothing placed: 1 instance blocked (i2: host port 8080/tcp is taken by task t9); the version is placed on each one once it can take it"},
			"completed: nothing placed: 1 instance blocked (i2: host port 8080/tcp is taken by task t9); the version is placed on each one once it can take it"},
	} {
		if got := ProgressLine(tc.d); got != tc.want {
			t.Errorf("ProgressLine = %q, want %q", got, tc.want)
		}
	}
	if !DeploymentRunning(&pbscheduler.Deployment{Status: "pending"}) || DeploymentRunning(&pbscheduler.Deployment{Status: "stopped"}) {
		t.Error("DeploymentRunning")
	}
}

// How deploy --wait ends: success only for a deployment that completed
// with its version placed; otherwise what happened, why, and what comes
// next.
func TestWaitResult(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    *pbscheduler.Deployment
		want string // "" for success
	}{
		{"completed", &pbscheduler.Deployment{Status: "completed", Total: 3, Complete: 3}, ""},
		{"completed with nothing placed",
			&pbscheduler.Deployment{Status: "completed", StatusReason: "nothing placed: no instance of the instance group (cluster default) is ready (2 down: a, b); the version is placed on each one that becomes ready"},
			"deployment d2 of ls completed with nothing placed: no instance of the instance group (cluster default) is ready (2 down: a, b); the version is placed on each one that becomes ready"},
		{"unhealthy, no rollback", &pbscheduler.Deployment{Status: "unhealthy", Total: 3, Failed: 1, StatusReason: "task t1 stopped"},
			"deployment d2 of ls ended unhealthy: task t1 stopped"},
		{"unhealthy, rolled back", &pbscheduler.Deployment{Status: "unhealthy", Total: 3, Failed: 1, StatusReason: "task t1 stopped", RollbackDeployment: "d3", RollbackVersionNumber: 1},
			"deployment d2 of ls ended unhealthy: task t1 stopped\nauto_rollback started deployment d3, which returns ls to version 1; follow it with: trellis deployment get ls d3"},
		{"stopped", &pbscheduler.Deployment{Status: "stopped", Total: 3, Complete: 1, StatusReason: "stopped by a user"},
			"deployment d2 of ls ended stopped: stopped by a user"},
	} {
		err := WaitResult("ls", "d2", tc.d)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want success", tc.name, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%s:\n got %v\nwant %s", tc.name, err, tc.want)
		}
	}
}

func TestEnvironmentHealth(t *testing.T) {
	for _, tc := range []struct {
		e    *pbscheduler.EnvironmentStatus
		want string
	}{
		// The stored default says healthy before anything was judged.
		{&pbscheduler.EnvironmentStatus{Status: "inactive", Health: "healthy"}, "not deployed"},
		{nil, "not deployed"}, // the scheduler has not reported yet
		{&pbscheduler.EnvironmentStatus{Status: "active", Health: "healthy", DesiredVersion: "v1"}, "healthy"},
		{&pbscheduler.EnvironmentStatus{Status: "active", Health: "unhealthy", DesiredVersion: "v2"}, "unhealthy"},
		{&pbscheduler.EnvironmentStatus{Status: "inactive", Health: "healthy", DesiredVersion: "v2"}, "healthy"}, // stopped: still deployed
	} {
		if got := EnvironmentHealth(tc.e); got != tc.want {
			t.Errorf("EnvironmentHealth(%v) = %q, want %q", tc.e, got, tc.want)
		}
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
			{Instance: "node-1", Matches: true, Task: "t1", TaskDefinition: "ls:4", VersionNumber: 2, State: "active", Health: "healthy"},
			{Instance: "node-2", Matches: true, Task: "t2", TaskDefinition: "ls:4", VersionNumber: 2, State: "launching"},
			{Instance: "node-3", Matches: true, Task: "t3", TaskDefinition: "ls:3", VersionNumber: 1, State: "unhealthy", Health: "unhealthy"},
			{Instance: "node-4", Matches: false, Task: "t4", TaskDefinition: "ls:3", VersionNumber: 1, State: "stopping", Health: "healthy"},
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
node-1     2         ls:4      t1     active                         healthy
node-2     2         ls:4      t2     launching                      -
node-3     1         ls:3      t3     unhealthy                      unhealthy
node-4     1         ls:3      t4     stopping (no longer matches)   healthy
node-5     -         -         -      missing                        -
`)
	// A blocked instance adds the reason column.
	b.Reset()
	_ = WriteEnvironmentStatus(&b, &pbscheduler.EnvironmentState{Summary: "2 desired: 1 active, 0 launching, 0 unhealthy, 1 blocked",
		Instances: []*pbscheduler.InstanceState{
			{Instance: "node-1", Matches: true, Task: "t1", TaskDefinition: "web:1", VersionNumber: 1, State: "active", Health: "healthy"},
			{Instance: "node-2", Matches: true, State: "blocked", Reason: "host port 8080/tcp is taken by task t9"},
		}})
	checkLines(t, b.String(), `2 desired: 1 active, 0 launching, 0 unhealthy, 1 blocked

INSTANCE   VERSION   TASKDEF   TASK   STATE     HEALTH    REASON
node-1     1         web:1     t1     active    healthy   -
node-2     -         -         -      blocked   -         host port 8080/tcp is taken by task t9
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
	_ = WriteDiff(&b, &pbscheduler.EnvironmentDiff{VersionNumber: 1, TaskDefinition: "web:1", Place: 1, Blocked: 1, Changes: []*pbscheduler.InstanceChange{
		{Instance: "node-1", Action: "place", ToTaskDefinition: "web:1"},
		{Instance: "node-2", Action: "blocked", ToTaskDefinition: "web:1", Reason: "host port 8080/tcp is taken by task t9"},
	}})
	checkLines(t, b.String(), `Deploying version 1 (web:1) would place 1, replace 0, stop 0, keep 0, and is blocked on 1.

INSTANCE   ACTION    FROM   TO      REASON
node-1     place     -      web:1   -
node-2     blocked   -      web:1   host port 8080/tcp is taken by task t9
`)
	b.Reset()
	_ = WriteDiff(&b, &pbscheduler.EnvironmentDiff{VersionNumber: 1, TaskDefinition: "ls:3"})
	checkLines(t, b.String(), "Deploying version 1 (ls:3) would place 0, replace 0, stop 0, keep 0.\nNo instance matches the instance group, and no task runs: nothing to do.\n")
}

func TestWriteEnvironments(t *testing.T) {
	var b bytes.Buffer
	err := WriteEnvironments(&b, []NamedEnvironment{
		{"log-shipper", &pbscheduler.Environment{Type: "daemon", TaskDefinition: "ls:4", VersionCount: 2},
			&pbscheduler.EnvironmentStatus{Status: "active", Health: "healthy", ActiveDeployment: "d2", DesiredVersion: "v2", DesiredVersionNumber: 2, DesiredTaskDefinition: "ls:4"}},
		// Rolled back: what runs is version 1, not the latest.
		{"rolled", &pbscheduler.Environment{Type: "daemon", TaskDefinition: "r:2", VersionCount: 2},
			&pbscheduler.EnvironmentStatus{Status: "active", Health: "healthy", DesiredVersion: "u1", DesiredVersionNumber: 1, DesiredTaskDefinition: "r:1"}},
		// Never deployed: not "healthy"; nor when not reported on yet.
		{"exporter", &pbscheduler.Environment{Type: "daemon", TaskDefinition: "ne:1", VersionCount: 1},
			&pbscheduler.EnvironmentStatus{Status: "inactive", Health: "healthy"}},
		{"fresh", &pbscheduler.Environment{Type: "daemon", TaskDefinition: "f:1", VersionCount: 1}, nil},
		{"old", &pbscheduler.Environment{Type: "daemon", Deleting: true, TaskDefinition: "old:1", VersionCount: 1},
			&pbscheduler.EnvironmentStatus{Status: "active", Health: "unhealthy", DesiredVersion: "u9", DesiredVersionNumber: 1, DesiredTaskDefinition: "old:1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkLines(t, b.String(), `NAME          TYPE     STATUS     HEALTH         DESIRED     LATEST      DEPLOYING
log-shipper   daemon   active     healthy        2 (ls:4)    2 (ls:4)    d2
rolled        daemon   active     healthy        1 (r:1)     2 (r:2)     -
exporter      daemon   inactive   not deployed   -           1 (ne:1)    -
fresh         daemon   inactive   not deployed   -           1 (f:1)     -
old           daemon   deleting   unhealthy      1 (old:1)   1 (old:1)   -
`)
}

// After a rollback, env get shows what runs (the desired version's spec),
// every version by its number with the uuid beside it, and the latest
// apart.
func TestWriteEnvironment(t *testing.T) {
	p := int32(50)
	v := EnvironmentView{
		Name: "ls", Namespace: "default",
		Env: &pbscheduler.Environment{
			Type: "daemon", TaskDefinition: "ls:4",
			InstanceGroup: &pbscheduler.InstanceGroup{Attributes: []string{"role=logger", "zone in (a,b)"}},
			Deployment:    &pbscheduler.DeploymentConfig{MinHealthyPercent: &p, MinHealthyTime: "10s", AutoRollback: true},
			LatestVersion: "v2", VersionCount: 2,
		},
		Status: &pbscheduler.EnvironmentStatus{
			Status: "active", Health: "healthy",
			DesiredVersion: "v1", DesiredVersionNumber: 1, DesiredTaskDefinition: "ls:3",
			LastCompletedVersion: "v1", LastCompletedVersionNumber: 1,
		},
		Desired: &pbscheduler.EnvironmentVersion{Number: 1, TaskDefinition: "ls:3",
			InstanceGroup: &pbscheduler.InstanceGroup{Attributes: []string{"role=logger"}},
			Deployment:    &pbscheduler.DeploymentConfig{MinHealthyPercent: &p, AutoRollback: true}},
		State: &pbscheduler.EnvironmentState{Summary: "2 desired: 2 active, 0 launching, 0 unhealthy"},
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
Desired version:   1 (v1, ls:3)
Task definition:   ls:3
Instance group:    cluster default, role=logger
Deployment:        min healthy 50%, healthy for 0s, healthy deadline 5m, progress deadline 10m, auto rollback
Latest version:    2 (v2, ls:4), not desired: trellis env diff ls shows what deploying it would change
Last completed:    1 (v1)
Deploying:         nothing
Tasks:             2 desired: 2 active, 0 launching, 0 unhealthy
`)

	// A deployment in progress of the latest version: desired is latest.
	v.Status.DesiredVersion, v.Status.DesiredVersionNumber, v.Status.DesiredTaskDefinition, v.Status.ActiveDeployment = "v2", 2, "ls:4", "d2"
	v.Desired = &pbscheduler.EnvironmentVersion{Number: 2, TaskDefinition: "ls:4", InstanceGroup: v.Env.InstanceGroup, Deployment: v.Env.Deployment}
	v.ActiveID, v.Active = "d2", &pbscheduler.Deployment{Status: "in-progress", VersionNumber: 2, Total: 2, Complete: 1}
	b.Reset()
	_ = WriteEnvironment(&b, v)
	for _, want := range []string{"Desired version:   2 (v2, ls:4)\n", "Task definition:   ls:4\n", "Latest version:    2 (v2, ls:4)\n",
		"Instance group:    cluster default, role=logger, zone in (a,b)\n", "Deploying:         d2, version 2, in-progress: 1/2 complete\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("deploying the latest: no %q in\n%s", want, b.String())
		}
	}

	// A server that sends no desired version: its task definition still
	// comes from the environment's record of it, not from the latest spec.
	v.Desired, v.Status.DesiredVersion, v.Status.DesiredVersionNumber, v.Status.DesiredTaskDefinition = nil, "v1", 0, "ls:3"
	b.Reset()
	_ = WriteEnvironment(&b, v)
	if !strings.Contains(b.String(), "Desired version:   v1 (ls:3)\n") || !strings.Contains(b.String(), "Task definition:   ls:3\n") {
		t.Errorf("no desired version sent:\n%s", b.String())
	}

	b.Reset()
	_ = WriteEnvironment(&b, EnvironmentView{Name: "new", Env: &pbscheduler.Environment{Type: "daemon", TaskDefinition: "n:1", LatestVersion: "v1", VersionCount: 1}})
	for _, want := range []string{"Health:            not deployed\n", "Desired version:   none: never deployed (trellis deploy new)\n", "Task definition:   n:1\n",
		"Latest version:    1 (v1, n:1)\n", "Deploying:         nothing\n", "min healthy 75%, healthy for 0s, healthy deadline 5m, progress deadline 10m\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("never deployed: no %q in\n%s", want, b.String())
		}
	}
}

func TestWriteDeployments(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var b bytes.Buffer
	err := WriteDeployments(&b, []NamedDeployment{
		{"d2", &pbscheduler.Deployment{Type: "user", VersionNumber: 2, TaskDefinition: "ls:4", Status: "in-progress", Total: 4, Complete: 1, CreatedAt: timestamppb.New(now.Add(-30 * time.Second))}},
		{"d1", &pbscheduler.Deployment{Type: "user", VersionNumber: 1, TaskDefinition: "ls:3", Status: "unhealthy", Total: 4, Complete: 1, Failed: 1,
			RollbackDeployment: "d1b", RollbackVersionNumber: 1, CreatedAt: timestamppb.New(now.Add(-10 * time.Minute))}},
		{"d0", &pbscheduler.Deployment{Type: "user", VersionNumber: 1, TaskDefinition: "ls:3", Status: "completed", CreatedAt: timestamppb.New(now.Add(-time.Hour))}},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	checkLines(t, b.String(), `ID   TYPE   VERSION   TASKDEF   STATUS                                PROGRESS                 AGE
d2   user   2         ls:4      in-progress                           1/4 complete             30s
d1   user   1         ls:3      unhealthy, rolled back to version 1   1/4 complete, 1 failed   10m
d0   user   1         ls:3      completed                             nothing placed           60m
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

func TestWriteDeploymentRolledBack(t *testing.T) {
	d := &pbscheduler.Deployment{
		Environment: "ls", Version: "v2", VersionNumber: 2, TaskDefinition: "ls:4", Type: "user", Status: "unhealthy",
		StatusReason: "task t3 on instance node-3 stopped: exit 1", Total: 3, Complete: 2, Failed: 1,
		RollbackDeployment: "d3", RollbackVersionNumber: 1,
	}
	var b bytes.Buffer
	if err := WriteDeployment(&b, "d2", d); err != nil {
		t.Fatal(err)
	}
	checkLines(t, b.String(), `Deployment:       d2
Environment:      ls
Type:             user
Version:          2 (v2, ls:4)
Status:           unhealthy, rolled back to version 1
Reason:           task t3 on instance node-3 stopped: exit 1
Progress:         2/3 complete, 1 failed
Rolled back by:   d3
Created:          -
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
