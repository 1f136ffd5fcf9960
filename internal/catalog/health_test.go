package catalog_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/orchestrator"
)

// A task's and a container's health, judged by the orchestrator's one
// rule, become a check's status through CheckStatusOf alone.
func TestCheckStatusOfTasksAndContainers(t *testing.T) {
	running := func(containers ...*pborch.ContainerState) *pborch.TaskStatus {
		return &pborch.TaskStatus{LastStatus: orchestrator.StatusRunning, Containers: containers}
	}
	c := func(status, health string) *pborch.ContainerState {
		return &pborch.ContainerState{Name: "app", Status: status, Health: health}
	}
	for _, tc := range []struct {
		name     string
		task     *pborch.TaskStatus
		wantTask string // the "<task>" check: TaskHealth
		wantApp  string // the "<task>/app" check: ContainerHealth
	}{
		{"pending", &pborch.TaskStatus{LastStatus: orchestrator.StatusPending}, catalog.CheckCritical, catalog.CheckCritical},
		{"no report yet", &pborch.TaskStatus{}, catalog.CheckCritical, catalog.CheckCritical},
		{"running without checks", running(c(orchestrator.StatusRunning, "")), catalog.CheckPassing, catalog.CheckPassing},
		{"running, check passes", running(c(orchestrator.StatusRunning, orchestrator.HealthHealthy)), catalog.CheckPassing, catalog.CheckPassing},
		{"running, check fails", running(c(orchestrator.StatusRunning, orchestrator.HealthUnhealthy)), catalog.CheckCritical, catalog.CheckCritical},
		{"running, check undecided", running(c(orchestrator.StatusRunning, orchestrator.HealthUnknown)), catalog.CheckCritical, catalog.CheckCritical},
		{"container not started", running(c(orchestrator.StatusPending, "")), catalog.CheckPassing, catalog.CheckCritical},
		{"container stopped", running(c(orchestrator.StatusStopped, orchestrator.HealthUnhealthy)), catalog.CheckCritical, catalog.CheckCritical},
		{"container not reported", running(), catalog.CheckPassing, catalog.CheckCritical},
		{"lost with its instance", &pborch.TaskStatus{LastStatus: orchestrator.StatusLost, Containers: []*pborch.ContainerState{c(orchestrator.StatusRunning, orchestrator.HealthHealthy)}}, catalog.CheckCritical, catalog.CheckCritical},
		{"stopped", &pborch.TaskStatus{LastStatus: orchestrator.StatusStopped, Containers: []*pborch.ContainerState{c(orchestrator.StatusStopped, "")}}, catalog.CheckCritical, catalog.CheckCritical},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The task's overall health field follows its checks, as the
			// agent reports it.
			if tc.task.GetLastStatus() == orchestrator.StatusRunning && len(tc.task.GetContainers()) > 0 {
				tc.task.Health = tc.task.GetContainers()[0].GetHealth()
			}
			if got := catalog.CheckStatusOf(orchestrator.TaskHealth(tc.task)); got != tc.wantTask {
				t.Errorf("the task's check: %q (TaskHealth %q), want %q", got, orchestrator.TaskHealth(tc.task), tc.wantTask)
			}
			if got := catalog.CheckStatusOf(orchestrator.ContainerHealth(tc.task, "app")); got != tc.wantApp {
				t.Errorf("the container's check: %q (ContainerHealth %q), want %q", got, orchestrator.ContainerHealth(tc.task, "app"), tc.wantApp)
			}
		})
	}
	// Only the judgement "healthy" passes.
	for h, want := range map[string]string{
		orchestrator.TaskHealthy: catalog.CheckPassing, orchestrator.TaskUnhealthy: catalog.CheckCritical,
		orchestrator.TaskHealthUnknown: catalog.CheckCritical, "": catalog.CheckCritical,
		// The agent's report words are not judgements: they never pass.
		orchestrator.HealthHealthy: catalog.CheckCritical,
	} {
		if got := catalog.CheckStatusOf(h); got != want {
			t.Errorf("CheckStatusOf(%q) = %q, want %q", h, got, want)
		}
	}
}

func TestAggregate(t *testing.T) {
	cs := func(statuses ...string) []*pbcatalog.CheckStatus {
		var out []*pbcatalog.CheckStatus
		for _, s := range statuses {
			out = append(out, &pbcatalog.CheckStatus{Status: s})
		}
		return out
	}
	for _, tc := range []struct {
		checks []*pbcatalog.CheckStatus
		want   string
	}{
		{nil, catalog.CheckPassing},
		{cs(catalog.CheckPassing, catalog.CheckPassing), catalog.CheckPassing},
		{cs(catalog.CheckPassing, catalog.CheckWarning), catalog.CheckWarning},
		{cs(catalog.CheckWarning, catalog.CheckCritical, catalog.CheckPassing), catalog.CheckCritical},
		{cs("bogus"), catalog.CheckCritical},
	} {
		if got := catalog.Aggregate(tc.checks); got != tc.want {
			t.Errorf("Aggregate(%v) = %q, want %q", tc.checks, got, tc.want)
		}
	}
}

func TestMergeHealth(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	report := func(at time.Duration, statuses ...string) *pbcatalog.ChecksStatus {
		cs := &pbcatalog.ChecksStatus{ReportedAt: timestamppb.New(t0.Add(at))}
		for i, s := range statuses {
			cs.Checks = append(cs.Checks, &pbcatalog.CheckStatus{Name: []string{"t1/app", "t1", "t1/extra"}[i], Status: s})
		}
		cs.Health = catalog.Aggregate(cs.Checks)
		return cs
	}
	ofTask := okInstance()
	external := okExternal()
	for _, tc := range []struct {
		name           string
		si             *pbcatalog.ServiceInstance
		agent, servers *pbcatalog.ChecksStatus
		want           []string
		health         string
	}{
		{"nothing reported", ofTask, nil, nil, []string{catalog.CheckCritical, catalog.CheckCritical}, catalog.CheckCritical},
		{"the agent's report", ofTask, report(0, catalog.CheckPassing, catalog.CheckPassing), nil, []string{catalog.CheckPassing, catalog.CheckPassing}, catalog.CheckPassing},
		{"a check not reported", ofTask, report(0, catalog.CheckPassing), nil, []string{catalog.CheckPassing, catalog.CheckCritical}, catalog.CheckCritical},
		{"a check not defined is left out", ofTask, report(0, catalog.CheckPassing, catalog.CheckPassing, catalog.CheckCritical), nil, []string{catalog.CheckPassing, catalog.CheckPassing}, catalog.CheckPassing},
		{"the servers' verdict over the report it judged", ofTask, report(0, catalog.CheckPassing, catalog.CheckPassing), report(0, catalog.CheckCritical, catalog.CheckCritical), []string{catalog.CheckCritical, catalog.CheckCritical}, catalog.CheckCritical},
		{"a newer report over the verdict", ofTask, report(time.Second, catalog.CheckPassing, catalog.CheckWarning), report(0, catalog.CheckCritical, catalog.CheckCritical), []string{catalog.CheckPassing, catalog.CheckWarning}, catalog.CheckWarning},
		{"external: the servers' TTL checks", external, nil, &pbcatalog.ChecksStatus{Checks: []*pbcatalog.CheckStatus{{Name: "service:db", Status: catalog.CheckPassing}}}, []string{catalog.CheckPassing}, catalog.CheckPassing},
		{"external: an agent's key is not believed", external, &pbcatalog.ChecksStatus{Checks: []*pbcatalog.CheckStatus{{Name: "service:db", Status: catalog.CheckPassing}}}, nil, []string{catalog.CheckCritical}, catalog.CheckCritical},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := catalog.MergeHealth(tc.si, tc.agent, tc.servers)
			if len(got.GetChecks()) != len(tc.want) {
				t.Fatalf("checks %v, want %v", got.GetChecks(), tc.want)
			}
			for i, c := range got.GetChecks() {
				if c.GetName() != tc.si.GetChecks()[i].GetName() || c.GetStatus() != tc.want[i] {
					t.Fatalf("check %d: %v, want %s %s", i, c, tc.si.GetChecks()[i].GetName(), tc.want[i])
				}
				if c.GetStatus() == catalog.CheckCritical && c.GetOutput() == "" && tc.agent == nil && tc.servers == nil {
					t.Fatalf("check %d: critical for want of a report says nothing", i)
				}
			}
			if got.GetHealth() != tc.health {
				t.Fatalf("health %q, want %q", got.GetHealth(), tc.health)
			}
		})
	}
}

func TestExpireTTLChecks(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	si := &pbcatalog.ServiceInstance{Service: "db", Address: "10.0.0.9", Port: 5432, Checks: []*pbcatalog.CheckDefinition{
		{Name: "a", Ttl: durationpb.New(10 * time.Second)},
		{Name: "b", Ttl: durationpb.New(30 * time.Second)},
	}}
	refreshed := func(status string, at time.Duration) *pbcatalog.CheckStatus {
		return &pbcatalog.CheckStatus{Status: status, CheckedAt: timestamppb.New(t0.Add(at)), ChangedAt: timestamppb.New(t0)}
	}
	servers := func(a, b *pbcatalog.CheckStatus) *pbcatalog.ChecksStatus {
		a.Name, b.Name = "a", "b"
		cs := &pbcatalog.ChecksStatus{Checks: []*pbcatalog.CheckStatus{a, b}, ReportedAt: timestamppb.New(t0)}
		cs.Health = catalog.Aggregate(cs.Checks)
		return cs
	}
	for _, tc := range []struct {
		name    string
		si      *pbcatalog.ServiceInstance
		servers *pbcatalog.ChecksStatus
		now     time.Duration
		want    []string // nil: nothing to write
		wait    time.Duration
	}{
		{"nothing reported", si, nil, time.Hour, nil, 0},
		{"both fresh", si, servers(refreshed(catalog.CheckPassing, 0), refreshed(catalog.CheckWarning, 0)), 5 * time.Second, nil, 5 * time.Second},
		{"one runs out at its ttl", si, servers(refreshed(catalog.CheckPassing, 0), refreshed(catalog.CheckWarning, 0)), 10 * time.Second, []string{catalog.CheckCritical, catalog.CheckWarning}, 20 * time.Second},
		{"a refresh moves the deadline", si, servers(refreshed(catalog.CheckPassing, 8*time.Second), refreshed(catalog.CheckPassing, 0)), 10 * time.Second, nil, 8 * time.Second},
		{"both out", si, servers(refreshed(catalog.CheckPassing, 0), refreshed(catalog.CheckPassing, 0)), time.Minute, []string{catalog.CheckCritical, catalog.CheckCritical}, 0},
		{"critical already", si, servers(refreshed(catalog.CheckCritical, 0), refreshed(catalog.CheckCritical, 0)), time.Minute, nil, 0},
		{"an instance of a task is its agent's", okInstance(), servers(refreshed(catalog.CheckPassing, 0), refreshed(catalog.CheckPassing, 0)), time.Hour, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before []string
			for _, c := range tc.servers.GetChecks() {
				before = append(before, c.GetStatus())
			}
			now := t0.Add(tc.now)
			next, wait := catalog.ExpireTTLChecks(tc.si, tc.servers, now)
			if wait != tc.wait {
				t.Fatalf("wait %s, want %s", wait, tc.wait)
			}
			for i, c := range tc.servers.GetChecks() {
				if c.GetStatus() != before[i] {
					t.Fatal("ExpireTTLChecks changed its input")
				}
			}
			if tc.want == nil {
				if next != nil {
					t.Fatalf("wrote %v, want nothing", next)
				}
				return
			}
			if err := catalog.ValidateChecksStatus(next); err != nil {
				t.Fatalf("the report it writes is refused: %v", err)
			}
			for i, c := range next.GetChecks() {
				if c.GetStatus() != tc.want[i] {
					t.Fatalf("check %s: %q, want %q", c.GetName(), c.GetStatus(), tc.want[i])
				}
				if c.GetStatus() == catalog.CheckCritical && before[i] != catalog.CheckCritical && (!c.GetChangedAt().AsTime().Equal(now) || c.GetOutput() == "") {
					t.Fatalf("check %s expired without its time and reason: %v", c.GetName(), c)
				}
			}
			if !next.GetReportedAt().AsTime().Equal(now) {
				t.Fatalf("reported_at %v, want %v", next.GetReportedAt().AsTime(), now)
			}
		})
	}
}
