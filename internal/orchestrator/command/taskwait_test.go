package command

import (
	"context"
	"net/http"
	"strings"
	"testing"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

func TestTaskWaitVerdict(t *testing.T) {
	const (
		pending = orchestrator.StatusPending
		running = orchestrator.StatusRunning
		stopped = orchestrator.StatusStopped
		lost    = orchestrator.StatusLost
	)
	for _, tc := range []struct {
		want, desired, last string
		done                bool
		err                 string // "" when the wait goes on or is over
		healthy             bool   // wait for healthy too
		health              string // the agent's checks: "" none, HEALTHY, UNHEALTHY, UNKNOWN
	}{
		{running, running, running, false, "", true, orchestrator.HealthUnknown},   // its checks have not passed yet
		{running, running, running, false, "", true, orchestrator.HealthUnhealthy}, // it may pass again
		{running, running, running, true, "", true, orchestrator.HealthHealthy},
		{running, running, running, true, "", true, ""}, // no checks: healthy once it runs
		{running, running, pending, false, "", true, ""},
		{running, running, stopped, false, "it is STOPPED (exited 1): a stopped task never becomes RUNNING and healthy", true, ""},
		{running, running, running, true, "", false, ""},
		{running, running, pending, false, "", false, ""},
		{running, running, lost, false, "", false, ""}, // its instance may come back
		{running, running, stopped, false, "it is STOPPED (exited 1): a stopped task never becomes RUNNING", false, ""},
		{running, stopped, pending, false, "it is PENDING and was asked to stop (stopped by user): it will not be RUNNING", false, ""},
		{running, stopped, lost, false, "it is LOST and was asked to stop (stopped by user): it will not be RUNNING", false, ""},
		{running, stopped, running, true, "", false, ""},
		{stopped, running, running, false, "", false, ""},
		{stopped, stopped, running, false, "", false, ""},
		{stopped, running, lost, false, "", false, ""},
		{stopped, running, stopped, true, "", false, ""},
		{pending, running, pending, true, "", false, ""},
		{pending, running, running, false, "it is already RUNNING: a task never goes back to PENDING", false, ""},
		{lost, running, running, false, "", false, ""},
		{lost, running, stopped, false, "it is STOPPED (exited 1): a stopped task never becomes LOST", false, ""},
	} {
		task := &pborch.Task{DesiredStatus: tc.desired}
		if tc.desired == stopped {
			task.StopReason = "stopped by user"
		}
		st := &pborch.TaskStatus{LastStatus: tc.last}
		if tc.last == stopped {
			st.StopReason = "exited 1"
		}
		if tc.health != "" {
			st.Health = tc.health
			st.Containers = []*pborch.ContainerState{{Name: "app", Health: tc.health}}
		}
		done, err := TaskWaitVerdict(TaskWant{Status: tc.want, Healthy: tc.healthy}, task, st)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if done != tc.done || got != tc.err {
			t.Errorf("want %s (healthy %t), desired %s, last %s, health %q: done %t, err %q; want %t, %q", tc.want, tc.healthy, tc.desired, tc.last, tc.health, done, got, tc.done, tc.err)
		}
	}
}

// trellis task wait follows a task until its agent reports the status
// asked for, fails at once with what it became when that cannot come,
// names a task that does not exist and a status that is not one, and
// gives up after --timeout naming the status the task is in.
func TestTaskWaitCommand(t *testing.T) {
	watches := make(chan struct{}, 10)
	api, addr := testServerWrapped(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("watch") != "" {
				watches <- struct{}{}
			}
			h.ServeHTTP(w, r)
		})
	})
	task := store(t, api, orchestrator.TaskID("default", "01jweb"), &pborch.Task{TaskDefinition: "web:1", Instance: "i1", DesiredStatus: orchestrator.StatusRunning})

	type result struct {
		out string
		err error
	}
	waiting := make(chan result, 1)
	go func() {
		out, err := runCLI(addr, "wait", "01jweb", "--status", "running")
		waiting <- result{out, err}
	}()
	// The task is PENDING: the command watches it, and the report reaches
	// it through the watch (in its snapshot, or as a change after it).
	<-watches
	report(t, api, task, &pborch.TaskStatus{LastStatus: orchestrator.StatusRunning})
	if r := <-waiting; r.err != nil || r.out != "task 01jweb is RUNNING\n" {
		t.Fatalf("task wait --status running: %q, %v", r.out, r.err)
	}
	// Already there: at once, and as JSON the task.
	if out, err := runCLI(addr, "wait", "01jweb", "-o", "json"); err != nil || !strings.Contains(out, `"name": "01jweb"`) {
		t.Fatalf("task wait -o json of a running task: %q, %v", out, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"wait", "01jweb", "--status", "pending"}, "task 01jweb will never be PENDING: it is already RUNNING: a task never goes back to PENDING (trellis task show 01jweb)"},
		{[]string{"wait", "01jnope"}, `task "01jnope" not found (trellis task list -A shows the tasks)`},
		// (trellis itself words it as --status: ..., cmd/trellis's flagError)
		{[]string{"wait", "01jweb", "--status", "runing"}, `invalid argument "runing" for "--status" flag: "runing" is not a task status: use PENDING, RUNNING, STOPPED or LOST`},
		{[]string{"wait", "01jweb", "--status", "stopped", "--healthy"}, "--healthy: only a RUNNING task is healthy, and --status is STOPPED"},
		{[]string{"wait", "01jweb", "--timeout", "-1s"}, "--timeout: -1s is negative: give a duration such as 30s, or 0 for no limit"},
		{[]string{"wait", "01jweb", "--status", "stopped", "--timeout", "100ms"}, "task 01jweb is still RUNNING after 100ms, not STOPPED (trellis task show 01jweb)"},
	} {
		if out, err := runCLI(addr, tc.args...); err == nil || err.Error() != tc.want {
			t.Errorf("task %s: %q, %v; want the error %q", strings.Join(tc.args, " "), out, err, tc.want)
		}
	}
	<-watches // the one the wait that timed out opened

	// It stops while a wait for LOST follows it.
	waiting = make(chan result, 1)
	go func() {
		out, err := runCLI(addr, "wait", "01jweb", "--status", "lost")
		waiting <- result{out, err}
	}()
	<-watches
	report(t, api, task, &pborch.TaskStatus{LastStatus: orchestrator.StatusStopped, StopReason: "essential container app exited with 1"})
	if r := <-waiting; r.err == nil || r.err.Error() != "task 01jweb will never be LOST: it is STOPPED (essential container app exited with 1): a stopped task never becomes LOST (trellis task show 01jweb)" {
		t.Fatalf("task wait --status lost on a task that stops: %q, %v", r.out, r.err)
	}

	// A task deleted while it is waited for.
	gone := store(t, api, orchestrator.TaskID("default", "01jgone"), &pborch.Task{TaskDefinition: "web:1", Instance: "i1", DesiredStatus: orchestrator.StatusRunning})
	waiting = make(chan result, 1)
	go func() {
		out, err := runCLI(addr, "wait", "01jgone")
		waiting <- result{out, err}
	}()
	<-watches
	if _, err := api.Delete(context.Background(), &pbresource.DeleteRequest{Id: gone.GetId()}); err != nil {
		t.Fatal(err)
	}
	if r := <-waiting; r.err == nil || r.err.Error() != "task 01jgone was deleted before it was RUNNING" {
		t.Fatalf("task wait on a task deleted meanwhile: %q, %v", r.out, r.err)
	}
}
