package tasks

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// The reporter never writes a replacement's report before the STOPPED
// report of the task it replaced: both go in one batch, the STOPPED one
// first, and while the old one's report cannot be written (the store has
// not shown it yet) the new one's waits.
func TestReportsOfAHandoverGoTogether(t *testing.T) {
	m := newManager(t)
	task := func(name, env, last string) *task {
		e := m.addTaskLocked("default", name, name+"-uid")
		e.stored = &pborch.Task{Instance: "i-1", Environment: env, DesiredStatus: orchestrator.StatusRunning}
		e.status = &pborch.TaskStatus{LastStatus: orchestrator.StatusPending}
		data, _ := anypb.New(e.stored)
		e.res = &pbresource.Resource{Id: orchestrator.TaskID("default", name), Data: data}
		e.res.Id.Uid = e.uid
		e.seen = true
		e.changed(Snapshot{Status: last})
		if last == orchestrator.StatusStopped {
			e.phase = phaseDone
		} else {
			e.phase = phaseRunning
		}
		return e
	}
	names := func(rs []Report) string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Request.GetId().GetName())
		}
		return strings.Join(out, ",")
	}
	m.mu.Lock()
	task("web-2", "web", orchestrator.StatusRunning)
	old := task("web-1", "web", orchestrator.StatusStopped)
	m.mu.Unlock()
	for range 10 { // map order varies
		rs := m.Reports()
		if got := names(rs); got != "web-1,web-2" {
			t.Fatalf("batch %s, want the STOPPED report of web-1 first", got)
		}
		if rs[0].After != "" || rs[1].After != "web-1-uid" {
			t.Fatalf("web-2's report follows %q, want web-1's", rs[1].After)
		}
	}
	m.mu.Lock()
	old.seen = false // resumed from local state: the store has not shown it
	m.mu.Unlock()
	if got := names(m.Reports()); got != "" {
		t.Fatalf("batch %s, want web-2 held back until web-1's report can be written", got)
	}
	m.mu.Lock()
	old.seen, old.written = true, old.seq // web-1's report is stored
	task("db-1", "db", orchestrator.StatusRunning)
	m.mu.Unlock()
	if got := names(m.Reports()); got != "db-1,web-2" && got != "web-2,db-1" {
		t.Fatalf("batch %s, want web-2 and db-1", got)
	}

	// Two tasks of an environment stopped here follow neither one the
	// other: each STOPPED report goes at once (each waiting for the other,
	// neither would ever be written).
	m.mu.Lock()
	task("logs-1", "logs", orchestrator.StatusStopped)
	task("logs-2", "logs", orchestrator.StatusStopped)
	m.mu.Unlock()
	for _, r := range m.Reports() {
		if name := r.Request.GetId().GetName(); strings.HasPrefix(name, "logs-") && r.After != "" {
			t.Fatalf("the STOPPED report of %s follows %s", name, r.After)
		}
	}
}
