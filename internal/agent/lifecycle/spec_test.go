package lifecycle

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	ok := func(cs ...ContainerSpec) TaskSpec { return task(noRestarts, cs...) }
	tests := []struct {
		name    string
		spec    TaskSpec
		wantErr string // a substring; "" for valid
	}{
		{"valid", ok(ctr("proxy", false), ctr("app", true, dep("proxy", CondHealthy))), ""},
		{"no containers", ok(), "containers: a task needs at least one container"},
		{"no name", ok(ctr("", true)), "containers[0].name: must not be empty"},
		{"duplicate name", ok(ctr("app", true), ctr("app", false)), `containers[1].name: "app" is also the name of containers[0]`},
		{"no driver", ok(ContainerSpec{Name: "app", Essential: true}), "containers[0].driver: must not be empty"},
		{"none essential", ok(ctr("app", false)), "at least one container must be essential"},
		{"unknown dependency", ok(ctr("app", true, dep("db", CondStart))),
			`containers[0].depends_on[0].container: "db" is not a container of the task`},
		{"self dependency", ok(ctr("app", true, dep("app", CondStart))), `depends on itself`},
		{"bad condition", ok(ctr("a", false), ctr("app", true, dep("a", "READY"))),
			`containers[1].depends_on[0].condition: "READY" is not one of`},
		{"cycle", ok(ctr("a", true, dep("b", CondStart)), ctr("b", false, dep("c", CondStart)), ctr("c", false, dep("a", CondSuccess))),
			"depends_on has a cycle: a -> b -> c -> a"},
		{"bad health check", ok(ContainerSpec{Name: "app", Driver: "exec", Essential: true, Health: &HealthCheck{TCP: "nope"}}),
			"containers[0].health_check: tcp:"},
		{"negative stop timeout", ok(ContainerSpec{Name: "app", Driver: "exec", Essential: true, StopTimeout: -time.Second}),
			"containers[0].stop_timeout: must not be negative"},
		{"drain signal of a non-sidecar", ok(withDrainSignal(ctr("app", true), syscall.SIGUSR1)),
			"containers[0].drain_signal: only a sidecar is signalled to drain"},
		{"negative attempts", task(RestartPolicy{Attempts: -1}, ctr("app", true)), "restart_policy.attempts"},
		{"jitter beyond 1", task(RestartPolicy{Jitter: 1.5}, ctr("app", true)), "restart_policy.jitter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("no error, want %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %q, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestMetadata(t *testing.T) {
	h := newHarness(t, task(noRestarts, sidecar(ctr("proxy", false)), ctr("app", true, dep("proxy", CondStart))))
	h.play([]move{
		{0, tick, s("start proxy")},
		{1 * sec, started("proxy"), s("start app")},
		{2 * sec, started("app"), nil},
		{3 * sec, stop("bye"), s("term app#1")},
	})
	m := h.st.Metadata()
	if m.TaskID != "default/t" || m.Status != TaskRunning || m.DesiredStatus != TaskStopped || m.Exited("app") {
		t.Fatalf("metadata during the stop: %+v", m)
	}
	h.play([]move{{4 * sec, exited("app", 0), s("term proxy#1")}})
	m = h.st.Metadata()
	app, _ := m.Container("app")
	if !m.Exited("app") || m.Exited("proxy") || app.ExitCode == nil || *app.ExitCode != 0 || !app.FinishedAt.Equal(t0.Add(4*sec)) {
		t.Fatalf("metadata after the app exited: %+v", m)
	}
	if m.Exited("nosuch") {
		t.Fatal("a container the task does not have counts as exited")
	}
	// The metadata shares nothing with the state.
	*app.ExitCode = 99
	if c := h.container("app"); *c.ExitCode != 0 {
		t.Fatal("metadata aliases the state's exit code")
	}
}
