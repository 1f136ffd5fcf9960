package agent

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/agent/tasks"
	"trellis.dev/trellis/internal/orchestrator"
)

// hookLog records what the components and the task runners did, in
// order, across agents: a restarted agent's components write to the same.
type hookLog struct {
	mu     sync.Mutex
	events []string
}

func (l *hookLog) add(ev string) {
	l.mu.Lock()
	l.events = append(l.events, ev)
	l.mu.Unlock()
}

// of are the events that end with suffix (" t1": those of task t1).
func (l *hookLog) of(suffix string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ev := range l.events {
		if strings.HasSuffix(ev, suffix) {
			out = append(out, ev)
		}
	}
	return out
}

func (l *hookLog) count(ev string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e == ev {
			n++
		}
	}
	return n
}

// wrapRunner logs "run TASK" when a runner's Run is called and "ended
// TASK" when it returns with the task stopped (not detached).
func (l *hookLog) wrapRunner(next NewRunnerFunc) NewRunnerFunc {
	return func(rc RunnerConfig) (TaskRunner, error) {
		r, err := next(rc)
		if err != nil {
			return nil, err
		}
		return loggedRunner{r, rc.Name, l}, nil
	}
}

type loggedRunner struct {
	TaskRunner
	task string
	log  *hookLog
}

func (r loggedRunner) Run(ctx context.Context, state json.RawMessage) error {
	r.log.add("run " + r.task)
	err := r.TaskRunner.Run(ctx, state)
	if ctx.Err() == nil {
		r.log.add("ended " + r.task)
	}
	return err
}

// testComponent records its hooks in log ("prestart NAME TASK",
// "poststop NAME TASK") and its Start's end ("stopped NAME"); check, when
// set, is called by each hook with the task and the hook's name, and its
// error is the hook's.
type testComponent struct {
	name  string
	log   *hookLog
	deps  component.Deps
	check func(ctx context.Context, c *testComponent, hook string, tk component.Task) error
}

func (c *testComponent) Name() string { return c.name }

func (c *testComponent) Start(ctx context.Context) error {
	<-ctx.Done()
	c.log.add("stopped " + c.name)
	return nil
}

func (c *testComponent) Prestart(ctx context.Context, tk component.Task) error {
	c.log.add("prestart " + c.name + " " + tk.ID.GetName())
	if c.check != nil {
		return c.check(ctx, c, "prestart", tk)
	}
	return nil
}

func (c *testComponent) Poststop(ctx context.Context, tk component.Task) error {
	c.log.add("poststop " + c.name + " " + tk.ID.GetName())
	if c.check != nil {
		return c.check(ctx, c, "poststop", tk)
	}
	return nil
}

// makers makes a testComponent of each name, all logging to log.
func makers(log *hookLog, check func(context.Context, *testComponent, string, component.Task) error, names ...string) []component.Maker {
	var out []component.Maker
	for _, n := range names {
		out = append(out, func(d component.Deps) (component.Component, error) {
			return &testComponent{name: n, log: log, deps: d, check: check}, nil
		})
	}
	return out
}

// A pid-file task: the container writes its pid into the task's directory
// and runs until it is stopped or a file "go" appears.
const pidScript = `echo $$ > pid; while [ ! -e go ]; do sleep 0.01; done; exit 3`

// readPID reads the pid the task's container wrote (0: none yet).
func readPID(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func TestComponentHooksRunInOrderAroundATask(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	log := &hookLog{}
	cfg := config(t, "i-1", pt, srv)
	cfg.NewRunner = log.wrapRunner(pt.newRunner)
	var (
		placedMu sync.Mutex
		placed   *pbresource.Resource
		agent    *Agent
	)
	check := func(_ context.Context, c *testComponent, hook string, tk component.Task) error {
		placedMu.Lock()
		uid, a := placed.GetId().GetUid(), agent
		placedMu.Unlock()
		if tk.ID.GetUid() != uid || tk.ID.GetTenancy().GetNamespace() != "default" || tk.Definition.GetFamily() != "pidder" || tk.Network.Mode != "host" {
			t.Errorf("%s of %s got task %v, definition %s, network %+v", hook, c.name, tk.ID, tk.Definition.GetFamily(), tk.Network)
		}
		if st, err := os.Stat(tk.Dir); err != nil || !st.IsDir() {
			t.Errorf("%s of %s: the task's directory %s: %v", hook, c.name, tk.Dir, err)
		}
		pid := readPID(tk.Dir)
		switch hook {
		case "prestart":
			if pid != 0 {
				t.Errorf("prestart of %s: the container runs already (pid %d)", c.name, pid)
			}
			// A component reaches the servers through the agent's link.
			err := c.deps.Servers.Call(context.Background(), func(ctx context.Context, cc grpc.ClientConnInterface) error {
				resp, err := pbresource.NewResourceServiceClient(cc).Read(ctx, &pbresource.ReadRequest{Id: orchestrator.TaskID("default", "t1")})
				if err == nil && resp.GetResource().GetId().GetUid() != uid {
					err = errors.New("read another task: " + resp.GetResource().GetId().GetUid())
				}
				return err
			})
			if err != nil {
				t.Errorf("prestart of %s: Servers.Call: %v", c.name, err)
			}
		case "poststop":
			p := pt.find(pid)
			if p == nil {
				t.Errorf("poststop of %s: no container process %d", c.name, pid)
				break
			}
			select {
			case <-p.done:
			default:
				t.Errorf("poststop of %s: the container (pid %d) still runs", c.name, pid)
			}
			// The runner has reported the task STOPPED; the report waits
			// for the Poststops: it is neither pending nor stored.
			for _, r := range a.tasks.Reports() {
				var st pborch.TaskStatus
				if r.Request.GetId().GetUid() == uid && r.Request.GetStatus().GetData().UnmarshalTo(&st) == nil && st.GetLastStatus() == orchestrator.StatusStopped {
					t.Errorf("poststop of %s: a STOPPED report is pending before the Poststops are done", c.name)
				}
			}
			if _, tk := srv.task(t, "default", "t1"); tk.GetLastStatus() == orchestrator.StatusStopped {
				t.Errorf("poststop of %s: the store shows the task STOPPED before the Poststops are done", c.name)
			}
		}
		return nil
	}
	cfg.Components = makers(log, check, "a", "b")
	a := startAgent(t, cfg)
	registered(t, srv, a)
	srv.registerDefinition(t, "default", shDefinition("pidder", pidScript))
	placedMu.Lock()
	agent = a.Agent
	placed = srv.place(t, "default", "t1", "pidder:1", "i-1")
	placedMu.Unlock()
	srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))
	if got, want := log.of(" t1"), []string{"prestart a t1", "prestart b t1", "run t1"}; !slices.Equal(got, want) {
		t.Fatalf("while the task runs: %q, want %q", got, want)
	}

	srv.editTask(t, "default", "t1", func(tk *pborch.Task) { tk.DesiredStatus = orchestrator.StatusStopped })
	// The STOPPED report waits for the Poststops: the store never shows
	// the task stopped before its components have cleaned up.
	srv.waitTask(t, "default", "t1", "stops", lastStatus(orchestrator.StatusStopped))
	want := []string{"prestart a t1", "prestart b t1", "run t1", "ended t1", "poststop b t1", "poststop a t1"}
	if got := log.of(" t1"); !slices.Equal(got, want) {
		t.Errorf("hooks %q, want %q", got, want)
	}

	// The components stop with the agent, in reverse order.
	a.kill(t)
	if got := log.of("stopped a"); len(got) != 1 {
		t.Fatalf("component a stopped %d times", len(got))
	}
	if got := append(log.of("stopped b"), log.of("stopped a")...); !slices.Equal(got, []string{"stopped b", "stopped a"}) || !isSubsequence(log.of(""), got) {
		t.Errorf("components stopped in the order %q, want b then a", log.of(""))
	}
}

// isSubsequence says whether sub appears in all in its order.
func isSubsequence(all, sub []string) bool {
	i := 0
	for _, ev := range all {
		if i < len(sub) && ev == sub[i] {
			i++
		}
	}
	return i == len(sub)
}

func TestPrestartErrorFailsTheStart(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	log := &hookLog{}
	cfg := config(t, "i-1", pt, srv)
	cfg.NewRunner = log.wrapRunner(pt.newRunner)
	cfg.Components = makers(log, func(_ context.Context, c *testComponent, hook string, _ component.Task) error {
		if c.name == "b" && hook == "prestart" {
			return errors.New("the catalog refused the registration")
		}
		return nil
	}, "a", "b", "c")
	a := startAgent(t, cfg)
	registered(t, srv, a)
	srv.registerDefinition(t, "default", shDefinition("pidder", pidScript))
	srv.place(t, "default", "t1", "pidder:1", "i-1")

	tk := srv.waitTask(t, "default", "t1", "fails to start", lastStatus(orchestrator.StatusStopped))
	if want := "cannot start: prestart of b: the catalog refused the registration"; tk.GetStopReason() != want {
		t.Errorf("stop reason %q, want %q", tk.GetStopReason(), want)
	}
	if n := pt.starts.Load(); n != 0 {
		t.Errorf("%d runs of the task's containers; a failed Prestart runs none", n)
	}
	// The Poststops of a and b (b may have half registered), none of c,
	// whose Prestart never ran.
	want := []string{"prestart a t1", "prestart b t1", "poststop b t1", "poststop a t1"}
	if got := log.of(" t1"); !slices.Equal(got, want) {
		t.Errorf("hooks %q, want %q", got, want)
	}
}

func TestComponentsNeedDistinctNames(t *testing.T) {
	cfg := config(t, "i-1", newProcTable(t), startServer(t))
	log := &hookLog{}
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"a", "a"}, `Components: two components are named "a"`},
		{[]string{""}, "Components: component 0 has no name"},
	} {
		cfg.Components = makers(log, nil, tc.names...)
		_, err := New(cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("components %q: New = %v, want an ErrConfig saying %q", tc.names, err, tc.want)
		}
	}
	cfg.Components = []component.Maker{func(component.Deps) (component.Component, error) { return nil, errors.New("no proxy binary") }}
	if _, err := New(cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "component 0: no proxy binary") {
		t.Errorf("a failing maker: New = %v", err)
	}
}

// An agent killed while its task runs (after the Prestarts, before the
// Poststops) and started again resumes the task: no Prestart again, and
// each Poststop once when the task stops.
func TestKilledAgentRunsPoststopOnceAndNoPrestartAgain(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	log := &hookLog{}
	cfg := config(t, "i-1", pt, srv)
	cfg.NewRunner = log.wrapRunner(pt.newRunner)
	cfg.Components = makers(log, nil, "a", "b")
	a1 := startAgent(t, cfg)
	registered(t, srv, a1)
	srv.registerDefinition(t, "default", shDefinition("pidder", pidScript))
	srv.place(t, "default", "t1", "pidder:1", "i-1")
	srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))
	a1.kill(t)

	a2 := startAgent(t, cfg)
	srv.waitTask(t, "default", "t1", "is reported by the new agent", func(tk *storedTask) bool {
		return tk.GetSession() == a2.Session() && tk.GetLastStatus() == orchestrator.StatusRunning
	})
	srv.editTask(t, "default", "t1", func(tk *pborch.Task) { tk.DesiredStatus = orchestrator.StatusStopped })
	srv.waitTask(t, "default", "t1", "stops", lastStatus(orchestrator.StatusStopped))
	want := []string{"prestart a t1", "prestart b t1", "run t1", "run t1", "ended t1", "poststop b t1", "poststop a t1"}
	if got := log.of(" t1"); !slices.Equal(got, want) {
		t.Errorf("hooks %q, want %q", got, want)
	}
	if pt.starts.Load() != 1 || pt.resume.Load() != 1 {
		t.Errorf("runs from scratch %d, resumed %d; want 1 and 1", pt.starts.Load(), pt.resume.Load())
	}
}

// A task whose containers exited while its agent was away has its
// Poststops due: the restarted agent calls each once, and only then
// reports the task STOPPED.
func TestPoststopDueWhileTheAgentWasAway(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	log := &hookLog{}
	cfg := config(t, "i-1", pt, srv)
	cfg.NewRunner = log.wrapRunner(pt.newRunner)
	cfg.Components = makers(log, nil, "a", "b")
	a1 := startAgent(t, cfg)
	registered(t, srv, a1)
	srv.registerDefinition(t, "default", shDefinition("pidder", pidScript))
	res := srv.place(t, "default", "t1", "pidder:1", "i-1")
	srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))
	a1.kill(t)

	dir := tasks.TaskDir(cfg.DataDir, res.GetId().GetUid())
	p := pt.find(readPID(dir))
	if p == nil {
		t.Fatalf("no process for the pid in %s", dir)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-waitTimeout():
		t.Fatal("the container did not exit")
	}
	if _, tk := srv.task(t, "default", "t1"); tk.GetLastStatus() != orchestrator.StatusRunning {
		t.Fatalf("the store says %s before the agent is back", tk.GetLastStatus())
	}

	startAgent(t, cfg)
	tk := srv.waitTask(t, "default", "t1", "is reported stopped", lastStatus(orchestrator.StatusStopped))
	if tk.GetStopReason() != "essential container app exited with code 3" {
		t.Errorf("stop reason %q", tk.GetStopReason())
	}
	want := []string{"prestart a t1", "prestart b t1", "run t1", "run t1", "ended t1", "poststop b t1", "poststop a t1"}
	if got := log.of(" t1"); !slices.Equal(got, want) {
		t.Errorf("hooks %q, want %q", got, want)
	}
}

// An agent killed in the middle of a Prestart calls it again when it
// starts again (the record says it was called, not that it completed),
// then goes on: the task starts once.
func TestPrestartCutShortIsCalledAgain(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	log := &hookLog{}
	cfg := config(t, "i-1", pt, srv)
	cfg.NewRunner = log.wrapRunner(pt.newRunner)
	var calls sync.Mutex
	first := true
	cfg.Components = makers(log, func(ctx context.Context, c *testComponent, hook string, tk component.Task) error {
		calls.Lock()
		block := c.name == "a" && hook == "prestart" && first
		first = first && !block
		calls.Unlock()
		if block {
			// Cut short: the agent is killed while it waits.
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}, "a", "b")
	a1 := startAgent(t, cfg)
	registered(t, srv, a1)
	srv.registerDefinition(t, "default", shDefinition("pidder", pidScript))
	srv.place(t, "default", "t1", "pidder:1", "i-1")
	eventually(t, "a's Prestart is called", func() bool { return log.count("prestart a t1") == 1 })
	a1.kill(t)
	if _, tk := srv.task(t, "default", "t1"); tk.GetLastStatus() == orchestrator.StatusStopped {
		t.Fatalf("the kill stopped the task: %s", tk.GetStopReason())
	}

	a2 := startAgent(t, cfg)
	srv.waitTask(t, "default", "t1", "runs under the new agent", func(tk *storedTask) bool {
		return tk.GetSession() == a2.Session() && tk.GetLastStatus() == orchestrator.StatusRunning
	})
	srv.editTask(t, "default", "t1", func(tk *pborch.Task) { tk.DesiredStatus = orchestrator.StatusStopped })
	srv.waitTask(t, "default", "t1", "stops", lastStatus(orchestrator.StatusStopped))
	want := []string{"prestart a t1", "prestart a t1", "prestart b t1", "run t1", "ended t1", "poststop b t1", "poststop a t1"}
	if got := log.of(" t1"); !slices.Equal(got, want) {
		t.Errorf("hooks %q, want %q", got, want)
	}
	if pt.starts.Load() != 1 {
		t.Errorf("the task's containers started %d times, want once", pt.starts.Load())
	}
}

// A Poststop's error does not hold the task: it stops, the other
// components' Poststops run, and the agent can leave.
func TestPoststopErrorAndLeave(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	log := &hookLog{}
	cfg := config(t, "i-1", pt, srv)
	cfg.NewRunner = log.wrapRunner(pt.newRunner)
	cfg.Components = makers(log, func(_ context.Context, c *testComponent, hook string, _ component.Task) error {
		if c.name == "b" && hook == "poststop" {
			return errors.New("the catalog is unreachable")
		}
		return nil
	}, "a", "b")
	a := startAgent(t, cfg)
	registered(t, srv, a)
	srv.registerDefinition(t, "default", shDefinition("pidder", pidScript))
	srv.place(t, "default", "t1", "pidder:1", "i-1")
	srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := RequestLeave(ctx, Control{Socket: a.ControlSocket()}); err != nil {
		t.Fatalf("leave: %v", err)
	}
	tk := srv.waitTask(t, "default", "t1", "stops", lastStatus(orchestrator.StatusStopped))
	if tk.GetStopReason() != tasks.ReasonLeaving {
		t.Errorf("stop reason %q", tk.GetStopReason())
	}
	want := []string{"prestart a t1", "prestart b t1", "run t1", "ended t1", "poststop b t1", "poststop a t1"}
	if got := log.of(" t1"); !slices.Equal(got, want) {
		t.Errorf("hooks %q, want %q", got, want)
	}
	select {
	case err := <-a.done:
		if err != nil {
			t.Errorf("Start = %v", err)
		}
		close(a.done)
	case <-waitTimeout():
		t.Fatal("Start did not return after the leave")
	}
	if got := append(log.of("stopped b"), log.of("stopped a")...); !slices.Equal(got, []string{"stopped b", "stopped a"}) {
		t.Errorf("components stopped: %q", log.of(""))
	}
}

// selectiveComponent is a testComponent whose hooks concern the tasks of
// one definition family only (component.Selective).
type selectiveComponent struct {
	testComponent
	family string
}

func (c *selectiveComponent) Applies(tk component.Task) bool {
	return tk.Definition.GetFamily() == c.family
}

// A component that says a task is not its own (component.Selective) gets
// neither hook for it, and nothing of it goes in the task's record; the
// other components' hooks run as ever, and its own tasks get both.
func TestSelectiveComponentSkipsOtherTasks(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	log := &hookLog{}
	cfg := config(t, "i-1", pt, srv)
	cfg.NewRunner = log.wrapRunner(pt.newRunner)
	cfg.Components = append(makers(log, nil, "a"), func(d component.Deps) (component.Component, error) {
		return &selectiveComponent{testComponent: testComponent{name: "mesh", log: log, deps: d}, family: "meshy"}, nil
	})
	a := startAgent(t, cfg)
	registered(t, srv, a)
	srv.registerDefinition(t, "default", shDefinition("plain", "exit 0"))
	srv.registerDefinition(t, "default", shDefinition("meshy", "exit 0"))
	srv.place(t, "default", "t1", "plain:1", "i-1")
	srv.place(t, "default", "t2", "meshy:1", "i-1")
	srv.waitTask(t, "default", "t1", "ends", lastStatus(orchestrator.StatusStopped))
	srv.waitTask(t, "default", "t2", "ends", lastStatus(orchestrator.StatusStopped))
	if got, want := log.of(" t1"), []string{"prestart a t1", "run t1", "ended t1", "poststop a t1"}; !slices.Equal(got, want) {
		t.Errorf("hooks of the plain task %q, want %q", got, want)
	}
	if got, want := log.of(" t2"), []string{"prestart a t2", "prestart mesh t2", "run t2", "ended t2", "poststop mesh t2", "poststop a t2"}; !slices.Equal(got, want) {
		t.Errorf("hooks of the mesh task %q, want %q", got, want)
	}
}
