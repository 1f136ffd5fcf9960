package lifecycle

import (
	"strings"
	"testing"
	"time"

	"trellis.dev/trellis/internal/agent/health"
)

const sec = time.Second

// TestStartupOrder: which containers start when, by depends_on.
func TestStartupOrder(t *testing.T) {
	tests := []struct {
		name       string
		spec       TaskSpec
		moves      []move
		wantStatus TaskStatus
		wantReason string // a substring of the stop reason; "" for none
	}{
		{
			name: "containers without edges start in parallel",
			spec: task(noRestarts, ctr("a", true), ctr("b", false), ctr("c", true)),
			moves: []move{
				{0, tick, s("start a", "start b", "start c")},
				{1 * sec, started("b"), nil},
				{1 * sec, started("a"), nil},
				{2 * sec, started("c"), nil},
			},
			wantStatus: TaskRunning,
		},
		{
			name: "a chain starts one after the other",
			spec: task(noRestarts,
				ctr("c", true, dep("b", CondStart)),
				ctr("b", false, dep("a", CondStart)),
				ctr("a", false)),
			moves: []move{
				{0, tick, s("start a")},
				{1 * sec, started("a"), s("start b")},
				{2 * sec, started("b"), s("start c")},
				{3 * sec, started("c"), nil},
			},
			wantStatus: TaskRunning,
		},
		{
			name: "a diamond waits for both branches",
			spec: task(noRestarts,
				ctr("top", false),
				ctr("left", false, dep("top", CondStart)),
				ctr("right", false, dep("top", CondStart)),
				ctr("app", true, dep("left", CondStart), dep("right", CondStart))),
			moves: []move{
				{0, tick, s("start top")},
				{1 * sec, started("top"), s("start left", "start right")},
				{2 * sec, started("right"), nil},
				{3 * sec, started("left"), s("start app")},
			},
			wantStatus: TaskPending,
		},
		{
			name: "HEALTHY waits for a passing health check",
			spec: task(noRestarts, withCheck(ctr("proxy", false)), ctr("app", true, dep("proxy", CondHealthy))),
			moves: []move{
				{0, tick, s("start proxy")},
				{1 * sec, started("proxy"), nil},
				{2 * sec, probed("proxy", false), nil},
				{3 * sec, probed("proxy", false), nil}, // UNHEALTHY: still waiting
				{4 * sec, probed("proxy", true), s("start app")},
				{5 * sec, started("app"), nil},
			},
			wantStatus: TaskRunning,
		},
		{
			name: "HEALTHY on a container without a check holds once it runs",
			spec: task(noRestarts, ctr("proxy", false), ctr("app", true, dep("proxy", CondHealthy))),
			moves: []move{
				{0, tick, s("start proxy")},
				{1 * sec, started("proxy"), s("start app")},
			},
			wantStatus: TaskPending,
		},
		{
			name: "COMPLETE accepts any exit code and the init container is not restarted",
			spec: task(RestartPolicy{Attempts: 3},
				ctr("init", false), ctr("app", true, dep("init", CondComplete))),
			moves: []move{
				{0, tick, s("start init")},
				{1 * sec, started("init"), nil},
				{2 * sec, exited("init", 3), s("start app")},
				{3 * sec, started("app"), nil},
				{4 * sec, tick, nil},
			},
			wantStatus: TaskRunning,
		},
		{
			name: "SUCCESS starts the dependant on exit 0; an essential init container that succeeded does not stop the task",
			spec: task(noRestarts, ctr("init", true), ctr("app", true, dep("init", CondSuccess))),
			moves: []move{
				{0, tick, s("start init")},
				{1 * sec, started("init"), nil},
				{2 * sec, exited("init", 0), s("start app")},
				{3 * sec, started("app"), nil},
			},
			wantStatus: TaskRunning,
		},
		{
			name: "SUCCESS after a failed init container is retried by the restart policy",
			spec: task(RestartPolicy{Attempts: 1, Delay: 5 * sec},
				ctr("init", false), ctr("app", true, dep("init", CondSuccess))),
			moves: []move{
				{0, tick, s("start init")},
				{1 * sec, started("init"), nil},
				{2 * sec, exited("init", 1), nil},
				{7 * sec, tick, s("start init replacing init#1")},
				{8 * sec, started("init"), nil},
				{9 * sec, exited("init", 0), s("start app")},
			},
			wantStatus: TaskPending,
		},
		{
			name: "SUCCESS that can never hold stops the task naming both containers",
			spec: task(noRestarts, ctr("init", false), ctr("app", true, dep("init", CondSuccess))),
			moves: []move{
				{0, tick, s("start init")},
				{1 * sec, started("init"), nil},
				{2 * sec, exited("init", 1), s("destroy init#1")},
			},
			wantStatus: TaskStopped,
			wantReason: "container app cannot start: its dependency init exited with code 1 (condition SUCCESS)",
		},
		{
			name: "a dependency that exits before becoming HEALTHY stops the task",
			spec: task(noRestarts,
				ctr("client", false),
				withCheck(ctr("proxy", false)),
				ctr("app", true, dep("proxy", CondHealthy))),
			moves: []move{
				{0, tick, s("start client", "start proxy")},
				{1 * sec, started("client"), nil},
				{1 * sec, started("proxy"), nil},
				{2 * sec, exited("proxy", 2), s("term client#1")},
				{3 * sec, exited("client", 0), s("destroy client#1", "destroy proxy#1")},
			},
			wantStatus: TaskStopped,
			wantReason: "container app cannot start: its dependency proxy exited with code 2 before becoming HEALTHY (condition HEALTHY)",
		},
		{
			name: "a HEALTHY dependency that exits but will be restarted is waited for",
			spec: task(RestartPolicy{Attempts: 1, Delay: 10 * sec},
				withCheck(ctr("proxy", false)), ctr("app", true, dep("proxy", CondHealthy))),
			moves: []move{
				{0, tick, s("start proxy")},
				{1 * sec, started("proxy"), nil},
				{2 * sec, exited("proxy", 2), nil},
				{12 * sec, tick, s("start proxy replacing proxy#1")},
				{13 * sec, started("proxy"), nil},
				{14 * sec, probed("proxy", true), s("start app")},
			},
			wantStatus: TaskPending,
		},
		{
			name: "a start error stops the task with the driver's error",
			spec: task(noRestarts, ctr("side", false), ctr("app", true)),
			moves: []move{
				{0, tick, s("start app", "start side")},
				{1 * sec, started("side"), nil},
				{1 * sec, failed("app", "exec: \"/nope\": no such file or directory"), s("term side#1")},
				{2 * sec, exited("side", 0), s("destroy side#1")},
			},
			wantStatus: TaskStopped,
			wantReason: "container app failed to start: exec: \"/nope\": no such file or directory",
		},
		{
			name: "seed 000 startup: init, then client and proxy, then the app once the proxy is healthy",
			spec: task(noRestarts,
				ctr("consul-client", false),
				ctr("mesh-init", false),
				sidecar(withCheck(ctr("sidecar-proxy", false, dep("mesh-init", CondSuccess)))),
				ctr("health-sync", false, dep("mesh-init", CondSuccess)),
				ctr("user-app", true, dep("sidecar-proxy", CondHealthy))),
			moves: []move{
				{0, tick, s("start consul-client", "start mesh-init")},
				{1 * sec, started("consul-client"), nil},
				{1 * sec, started("mesh-init"), nil},
				{2 * sec, exited("mesh-init", 0), s("start sidecar-proxy", "start health-sync")},
				{3 * sec, started("health-sync"), nil},
				{3 * sec, started("sidecar-proxy"), nil},
				{4 * sec, probed("sidecar-proxy", true), s("start user-app")},
				{5 * sec, started("user-app"), nil},
			},
			wantStatus: TaskRunning,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.spec)
			h.play(tt.moves)
			if h.st.Status != tt.wantStatus {
				t.Fatalf("task status %s, want %s (%s)", h.st.Status, tt.wantStatus, h.describe())
			}
			if tt.wantReason == "" && h.st.StopReason != "" {
				t.Fatalf("task stopping for %q, want it not stopping", h.st.StopReason)
			}
			if tt.wantReason != "" && !strings.Contains(h.st.StopReason, tt.wantReason) {
				t.Fatalf("stop reason %q, want %q", h.st.StopReason, tt.wantReason)
			}
		})
	}
}

func TestTaskAndContainerStatus(t *testing.T) {
	h := newHarness(t, task(noRestarts, ctr("side", false), ctr("app", true, dep("side", CondStart))))
	if h.st.Status != TaskPending || h.st.DesiredStatus != TaskRunning {
		t.Fatalf("new task: %s/%s, want PENDING/RUNNING", h.st.Status, h.st.DesiredStatus)
	}
	h.at(0, tick)
	if c := h.container("side"); c.Status != ContainerPending || c.Phase != PhaseStarting {
		t.Fatalf("side after start asked: %s/%s", c.Status, c.Phase)
	}
	h.at(1*sec, started("side"))
	if c := h.container("side"); c.Status != ContainerRunning || !c.StartedAt.Equal(t0.Add(1*sec)) || c.Handle == nil {
		t.Fatalf("side after started: %+v", c)
	}
	if h.st.Status != TaskPending {
		t.Fatalf("task %s before the essential app started, want PENDING", h.st.Status)
	}
	h.at(2*sec, started("app"))
	if h.st.Status != TaskRunning || !h.st.StartedAt.Equal(t0.Add(2*sec)) {
		t.Fatalf("task %s since %s, want RUNNING since 2s", h.st.Status, h.st.StartedAt.Sub(t0))
	}
	h.at(3*sec, exited("side", 4))
	c := h.container("side")
	if c.Status != ContainerStopped || c.ExitCode == nil || *c.ExitCode != 4 || !c.FinishedAt.Equal(t0.Add(3*sec)) {
		t.Fatalf("side after exit: %+v", c)
	}
	// A non-essential container that exits stays stopped; the task runs on.
	if h.st.Status != TaskRunning || h.st.Stopping() {
		t.Fatalf("task %s (%q) after a non-essential exit, want RUNNING", h.st.Status, h.st.StopReason)
	}
	v := h.st.Version
	h.at(4*sec, tick)
	if h.st.Version != v {
		t.Fatalf("a tick that changes nothing moved the version from %d to %d", v, h.st.Version)
	}
}

func TestHealthIsReportedNotActedOn(t *testing.T) {
	h := newHarness(t, task(noRestarts, withCheck(ctr("app", true))))
	h.play([]move{
		{0, tick, s("start app")},
		{1 * sec, started("app"), nil},
		{2 * sec, probed("app", true), nil},
		{3 * sec, probed("app", false), nil},
		{4 * sec, probed("app", false), nil},
		{5 * sec, tick, nil},
	})
	if c := h.container("app"); c.Health.Status != health.Unhealthy || c.Phase != PhaseRunning {
		t.Fatalf("app: %s, health %s; want running and UNHEALTHY", c.Phase, c.Health.Status)
	}
	// A probe of an earlier incarnation is ignored.
	h.at(6*sec, Probed{Container: "app", Incarnation: 7, Result: health.Result{Pass: true}})
	if c := h.container("app"); c.Health.Status != health.Unhealthy {
		t.Fatalf("a stale probe changed the health to %s", c.Health.Status)
	}
	h.at(7*sec, exited("app", 0))
	if c := h.container("app"); c.Health.Status != health.Unknown {
		t.Fatalf("an exited container's health is %s, want UNKNOWN", c.Health.Status)
	}
}

func TestStaleEventsAreIgnored(t *testing.T) {
	h := newHarness(t, task(RestartPolicy{Attempts: 1}, ctr("app", true)))
	h.play([]move{
		{0, tick, s("start app")},
		{1 * sec, started("app"), nil},
		{2 * sec, exited("app", 1), s("start app replacing app#1")},
		// News of the first incarnation, late, changes nothing.
		{3 * sec, Exited{Container: "app", Incarnation: 1}, nil},
		{3 * sec, Started{Container: "app", Incarnation: 1}, nil},
	})
	if c := h.container("app"); c.Phase != PhaseStarting || c.Incarnation != 2 {
		t.Fatalf("app: %s incarnation %d, want starting incarnation 2", c.Phase, c.Incarnation)
	}
}

func TestStepRefusesAMismatchedState(t *testing.T) {
	spec := task(noRestarts, ctr("app", true))
	other, _ := NewState(task(noRestarts, ctr("web", true)))
	d := Step(spec, other, tick, Env{Now: t0})
	if len(d.Actions) != 0 || d.State.Version != other.Version {
		t.Fatalf("Step acted on a state of another spec: %v", formatActions(d.Actions))
	}
}
