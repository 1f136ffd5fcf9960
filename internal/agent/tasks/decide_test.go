package tasks

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

func stored(desired string) *pborch.Task {
	return &pborch.Task{TaskDefinition: "web:1", Instance: "i-1", DesiredStatus: desired}
}

func reported(last string) *pborch.TaskStatus {
	return &pborch.TaskStatus{LastStatus: last}
}

func withReason(t *pborch.Task, reason string) *pborch.Task {
	t.StopReason = reason
	return t
}

func TestDecide(t *testing.T) {
	const (
		run  = orchestrator.StatusRunning
		stop = orchestrator.StatusStopped
		pend = orchestrator.StatusPending
		lost = orchestrator.StatusLost
	)
	for _, c := range []struct {
		name string
		s    situation
		want decision
	}{
		// Starting happens once, from PENDING.
		{"new task starts", situation{stored: stored(run), status: reported(pend)}, decision{start: true}},
		{"not while leaving", situation{stored: stored(run), status: reported(pend), leaving: true}, decision{}},
		{"not while the task it replaces stops", situation{stored: stored(run), status: reported(pend), waiting: true}, decision{}},
		{"a stop while waiting", situation{stored: stored(stop), status: reported(pend), waiting: true}, decision{finish: "stopped before it started: desired status is STOPPED"}},
		{"starting: nothing more", situation{stored: stored(run), status: reported(pend), phase: phaseStarting}, decision{}},
		{"running: nothing", situation{stored: stored(run), status: reported(run), phase: phaseRunning}, decision{}},
		{"done: never again", situation{stored: stored(run), status: reported(run), phase: phaseDone}, decision{}},
		// Not run here, though the store says it runs or was lost: closed.
		{"running elsewhere in time", situation{stored: stored(run), status: reported(run)}, decision{finish: "it no longer runs on instance i-1: the agent has no record of it"}},
		{"lost, not run here", situation{stored: stored(run), status: reported(lost)}, decision{finish: "lost: it no longer runs on instance i-1"}},
		// Desired STOPPED.
		{"stop before start", situation{stored: stored(stop), status: reported(pend)}, decision{finish: "stopped before it started: desired status is STOPPED"}},
		{"stop running", situation{stored: stored(stop), status: reported(run), phase: phaseRunning}, decision{stop: ReasonDesiredStopped}},
		{"stop starting", situation{stored: stored(stop), status: reported(pend), phase: phaseStarting}, decision{stop: ReasonDesiredStopped}},
		{"stop with the stopper's reason", situation{stored: withReason(stored(stop), "stopped by user: replaced"), status: reported(run), phase: phaseRunning}, decision{stop: "stopped by user: replaced"}},
		{"stop lost but running", situation{stored: stored(stop), status: reported(lost), phase: phaseRunning}, decision{stop: ReasonDesiredStopped}},
		{"stopping already", situation{stored: stored(stop), status: reported(run), phase: phaseStopping}, decision{}},
		{"stop lost, not here", situation{stored: stored(stop), status: reported(lost)}, decision{finish: "lost: it no longer runs on instance i-1"}},
		// Lost but running here: nothing to decide (the report re-adopts it).
		{"lost, running here", situation{stored: stored(run), status: reported(lost), phase: phaseRunning}, decision{}},
		// STOPPED in the store.
		{"stopped, never ours", situation{stored: stored(run), status: reported(stop)}, decision{forget: true}},
		{"stopped and reported", situation{stored: stored(run), status: reported(stop), phase: phaseDone, reported: true}, decision{forget: true}},
		{"stopped, report pending", situation{stored: stored(run), status: reported(stop), phase: phaseDone}, decision{}},
		{"stopped by someone, running here", situation{stored: stored(run), status: reported(stop), phase: phaseRunning}, decision{}},
		{"stopped by someone, unwanted", situation{stored: stored(stop), status: reported(stop), phase: phaseRunning}, decision{stop: ReasonDesiredStopped}},
		// Deleted.
		{"deleted, idle", situation{phase: phaseIdle}, decision{forget: true}},
		{"deleted, starting", situation{phase: phaseStarting}, decision{stop: ReasonDeleted, silent: true}},
		{"deleted, running", situation{phase: phaseRunning}, decision{stop: ReasonDeleted, silent: true}},
		{"deleted, stopping", situation{phase: phaseStopping}, decision{silent: true}},
		{"deleted, done", situation{phase: phaseDone}, decision{forget: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := decide(c.s); got != c.want {
				t.Errorf("decide = %+v, want %+v", got, c.want)
			}
		})
	}
}

// Whatever the situation, decide never both starts and does something
// else, and never starts a task that is not PENDING or that the agent has
// taken on already.
func TestDecideStartsOnlyIdlePending(t *testing.T) {
	statuses := []string{"", orchestrator.StatusPending, orchestrator.StatusRunning, orchestrator.StatusStopped, orchestrator.StatusLost}
	for _, desired := range []string{orchestrator.StatusRunning, orchestrator.StatusStopped} {
		for _, last := range statuses {
			for p := phaseIdle; p <= phaseDone; p++ {
				for _, deleted := range []bool{false, true} {
					for flags := range 8 {
						s := situation{phase: p, reported: flags&1 != 0, leaving: flags&2 != 0, waiting: flags&4 != 0}
						if !deleted {
							s.stored, s.status = stored(desired), reported(last)
						}
						d := decide(s)
						set := 0
						for _, b := range []bool{d.start, d.stop != "", d.finish != "", d.forget} {
							if b {
								set++
							}
						}
						name := fmt.Sprintf("%+v deleted=%v", s, deleted)
						if set > 1 {
							t.Errorf("%s: %+v does several things", name, d)
						}
						if d.start && (p != phaseIdle || deleted || last != orchestrator.StatusPending || desired != orchestrator.StatusRunning || s.leaving || s.waiting) {
							t.Errorf("%s: starts", name)
						}
						if d.stop != "" && p != phaseStarting && p != phaseRunning {
							t.Errorf("%s: stops a task that does not run", name)
						}
						if d.finish != "" && p != phaseIdle {
							t.Errorf("%s: finishes a task it ran", name)
						}
					}
				}
			}
		}
	}
}

func TestReportRoundTrip(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.UTC)
	code := 3
	snap := Snapshot{
		Status: orchestrator.StatusStopped, StopReason: "essential container app exited with code 3",
		StartedAt: now, StoppingAt: now.Add(time.Second), StoppedAt: now.Add(2 * time.Second),
		Containers: []ContainerStatus{{Name: "app", Status: orchestrator.StatusStopped, ExitCode: &code, StartedAt: now, FinishedAt: now.Add(time.Second), RuntimeID: "42", Restarts: 1}},
	}
	merged := reportOf(snap, nil, "s1")
	merged.ReportedAt = timestamppb.New(now)
	if merged.GetHealth() != orchestrator.HealthUnknown || merged.GetContainers()[0].GetExitCode() != 3 || merged.GetSession() != "s1" {
		t.Errorf("report %v", merged)
	}
	// What the store gives back (through the wire) carries the report.
	b, err := proto.Marshal(merged)
	if err != nil {
		t.Fatal(err)
	}
	var back pborch.TaskStatus
	if err := proto.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !orchestrator.SameReport(&back, reportOf(snap, nil, "s1")) {
		t.Errorf("a stored report does not compare equal to itself")
	}
	if orchestrator.SameReport(&back, reportOf(snap, nil, "s2")) {
		t.Errorf("a report of another session compares equal")
	}
	lost := proto.Clone(&back).(*pborch.TaskStatus)
	lost.LastStatus = orchestrator.StatusLost
	if orchestrator.SameReport(lost, reportOf(snap, nil, "s1")) {
		t.Errorf("a task marked lost compares equal to the report")
	}
}

func TestFinishedSnapshot(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	last := Snapshot{Status: orchestrator.StatusRunning, Containers: []ContainerStatus{
		{Name: "init", Status: orchestrator.StatusStopped, ExitCode: new(int), StartedAt: now.Add(-time.Hour), FinishedAt: now.Add(-time.Minute)},
		{Name: "app", Status: orchestrator.StatusRunning, StartedAt: now.Add(-time.Minute)},
		{Name: "late", Status: orchestrator.StatusPending},
	}}
	got := finishedSnapshot(last, "the task runner ended", now)
	if got.Status != orchestrator.StatusStopped || got.StopReason != "the task runner ended" || !got.StoppedAt.Equal(now) {
		t.Errorf("task: %+v", got)
	}
	if c := got.Containers[0]; *c.ExitCode != 0 || !c.FinishedAt.Equal(now.Add(-time.Minute)) {
		t.Errorf("a stopped container changed: %+v", c)
	}
	if c := got.Containers[1]; c.Status != orchestrator.StatusStopped || c.ExitCode == nil || *c.ExitCode != -1 || !c.FinishedAt.Equal(now) {
		t.Errorf("a running container: %+v; want stopped, exit code unknown", c)
	}
	if c := got.Containers[2]; c.Status != orchestrator.StatusStopped || c.ExitCode != nil {
		t.Errorf("a container that never started: %+v; want stopped without an exit code", c)
	}
	if last.Containers[1].Status != orchestrator.StatusRunning {
		t.Errorf("the last snapshot was modified")
	}
}

func TestUIDSet(t *testing.T) {
	s := newUIDSet(2)
	s.add("a")
	s.add("b")
	s.add("c")
	if s.has("a") || !s.has("b") || !s.has("c") {
		t.Errorf("oldest not dropped: %v", s.set)
	}
	s.keepOnly(map[string]bool{"c": true})
	if s.has("b") || !s.has("c") || len(s.order) != 1 {
		t.Errorf("keepOnly: %v %v", s.set, s.order)
	}
}
