package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"trellis.dev/trellis/internal/driver"
)

// shDriver is the least exec driver that runs real processes: a process
// group per container, signals to the group, Exec on the host. The real
// exec driver lives elsewhere; this one lets the lifecycle be tried end to
// end with real processes and real time.
type shDriver struct {
	mu    sync.Mutex
	procs map[string]*shProc
}

type shProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	exit driver.Exit
}

func (d *shDriver) Name() string { return "sh" }

func (d *shDriver) Fingerprint(context.Context) driver.Fingerprint {
	return driver.Fingerprint{Available: true}
}

func (d *shDriver) Start(ctx context.Context, spec driver.Spec) (driver.Handle, error) {
	if len(spec.Command) == 0 {
		return driver.Handle{}, errors.New("no command")
	}
	cmd := exec.Command(spec.Command[0], spec.Command[1:]...)
	cmd.Env = os.Environ()
	for k, v := range spec.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return driver.Handle{}, err
	}
	p := &shProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		p.exit = driver.Exit{Code: ws.ExitStatus()}
		if ws.Signaled() {
			p.exit = driver.Exit{Code: -1, Signal: ws.Signal()}
		}
		close(p.done)
	}()
	id := strconv.Itoa(cmd.Process.Pid)
	d.mu.Lock()
	if d.procs == nil {
		d.procs = map[string]*shProc{}
	}
	d.procs[id] = p
	d.mu.Unlock()
	return driver.Handle{Driver: "sh", ID: id, StartedAt: time.Now()}, nil
}

func (d *shDriver) proc(h driver.Handle) (*shProc, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.procs[h.ID]
	if !ok {
		return nil, driver.ErrGone
	}
	return p, nil
}

func (d *shDriver) Wait(ctx context.Context, h driver.Handle) (driver.Exit, error) {
	p, err := d.proc(h)
	if err != nil {
		return driver.Exit{}, err
	}
	select {
	case <-p.done:
		return p.exit, nil
	case <-ctx.Done():
		return driver.Exit{}, ctx.Err()
	}
}

func (d *shDriver) Signal(ctx context.Context, h driver.Handle, sig syscall.Signal) error {
	p, err := d.proc(h)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

func (d *shDriver) Exec(ctx context.Context, h driver.Handle, cmd []string) (int, []byte, error) {
	out, err := exec.CommandContext(ctx, cmd[0], cmd[1:]...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out, nil
	}
	if err != nil {
		return -1, out, err
	}
	return 0, out, nil
}

func (d *shDriver) Recover(ctx context.Context, h driver.Handle) error {
	_, err := d.proc(h)
	return err
}

func (d *shDriver) Destroy(context.Context, driver.Handle) error { return nil }

func (d *shDriver) Logs(context.Context, driver.Handle, driver.Spec, driver.Stream, bool) (io.ReadCloser, error) {
	return nil, errors.New("no logs")
}

// watchReports returns a Report function and a wait that blocks until a
// reported state satisfies cond, or fails the test after timeout.
func watchReports(t *testing.T) (report func(State), wait func(cond func(State) bool, timeout time.Duration) State) {
	var mu sync.Mutex
	var last State
	kick := make(chan struct{}, 1)
	report = func(s State) {
		mu.Lock()
		last = s
		mu.Unlock()
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	wait = func(cond func(State) bool, timeout time.Duration) State {
		t.Helper()
		deadline := time.NewTimer(timeout)
		defer deadline.Stop()
		for {
			mu.Lock()
			s := last
			mu.Unlock()
			if cond(s) {
				return s
			}
			select {
			case <-kick:
			case <-deadline.C:
				t.Fatalf("no report satisfied the condition within %s; last: %+v", timeout, s)
			}
		}
	}
	return report, wait
}

func sh(script string) driver.Spec { return driver.Spec{Command: []string{"/bin/sh", "-c", script}} }

// TestRealProcesses runs the seed 000 shape with real processes: an init
// container, a sidecar that ignores SIGTERM and becomes healthy when its
// file exists, and an app that exits on SIGTERM.
func TestRealProcesses(t *testing.T) {
	dir := t.TempDir()
	up := filepath.Join(dir, "proxy.up")
	appUp := filepath.Join(dir, "app.up")
	spec := TaskSpec{TaskID: "default/e2e", TaskUID: "u1", Containers: []ContainerSpec{
		{Name: "init", Driver: "sh", Spec: sh("echo done > " + filepath.Join(dir, "init.done"))},
		{Name: "proxy", Driver: "sh", Sidecar: true, StopTimeout: 300 * time.Millisecond,
			Spec:      sh(`trap '' TERM; sleep 0.2; touch ` + up + `; while :; do sleep 0.05; done`),
			DependsOn: []Dependency{{Container: "init", Condition: CondSuccess}},
			Health: &HealthCheck{Command: []string{"test", "-f", up}, Interval: time.Second,
				StartPeriod: 10 * time.Second, StartInterval: 50 * time.Millisecond, Timeout: 2 * time.Second}},
		{Name: "app", Driver: "sh", Essential: true,
			Spec:      sh(`trap 'exit 0' TERM; touch ` + appUp + `; while :; do sleep 0.05; done`),
			DependsOn: []Dependency{{Container: "proxy", Condition: CondHealthy}},
			// Healthy once its trap is set, so that the test stops it only then.
			Health: &HealthCheck{Command: []string{"test", "-f", appUp}, Interval: time.Second,
				StartPeriod: 10 * time.Second, StartInterval: 50 * time.Millisecond}},
	}}
	report, wait := watchReports(t)
	r, err := NewRunner(Config{Spec: spec, Drivers: map[string]driver.Driver{"sh": &shDriver{}}, Report: report})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(t.Context()) }()

	running := wait(func(s State) bool {
		app, _ := s.Container("app")
		return s.Status == TaskRunning && app.Health.Status == "HEALTHY"
	}, 10*time.Second)
	proxy, _ := running.Container("proxy")
	app, _ := running.Container("app")
	if proxy.Health.Status != "HEALTHY" || app.StartedAt.Before(proxy.StartedAt.Add(200*time.Millisecond)) {
		t.Fatalf("the app started at %s, the proxy at %s (health %s); want the app after the proxy was healthy",
			app.StartedAt, proxy.StartedAt, proxy.Health.Status)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "init.done")); err != nil || strings.TrimSpace(string(b)) != "done" {
		t.Fatalf("init container did not run: %q %v", b, err)
	}

	r.Stop("test over")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the task did not stop within 10s")
	}
	final := wait(func(s State) bool { return s.Done() }, time.Second)
	app, _ = final.Container("app")
	proxy, _ = final.Container("proxy")
	if app.ExitCode == nil || *app.ExitCode != 0 {
		t.Fatalf("app exit: %+v", app)
	}
	if proxy.ExitSignal != int(syscall.SIGKILL) || !proxy.Killed {
		t.Fatalf("proxy: signal %d killed %v; want SIGKILL after ignoring SIGTERM", proxy.ExitSignal, proxy.Killed)
	}
	// The proxy got SIGTERM only once the app had exited, and SIGKILL its
	// stop timeout later.
	if proxy.TermAt.Before(app.FinishedAt) || proxy.FinishedAt.Sub(proxy.TermAt) < 300*time.Millisecond {
		t.Fatalf("app finished %s; proxy TERM %s, finished %s", app.FinishedAt, proxy.TermAt, proxy.FinishedAt)
	}
	for _, c := range final.Containers {
		if c.Handle == nil {
			continue
		}
		// Each container's own process is gone (its children, if killed,
		// are left for init to reap, which is not this test's business).
		pid, _ := strconv.Atoi(c.Handle.ID)
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process of %s (%d) still exists: %v", c.Name, pid, err)
		}
	}
}

func TestRealProcessStartFailure(t *testing.T) {
	report, wait := watchReports(t)
	spec := TaskSpec{TaskID: "default/e2e", Containers: []ContainerSpec{
		{Name: "app", Driver: "sh", Essential: true, Spec: driver.Spec{Command: []string{"/nonexistent/web", "--port", "8080"}}},
	}}
	r, err := NewRunner(Config{Spec: spec, Drivers: map[string]driver.Driver{"sh": &shDriver{}}, Report: report})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	final := wait(func(s State) bool { return s.Status == TaskStopped }, time.Second)
	want := fmt.Sprintf("container app failed to start: fork/exec %s: no such file or directory", "/nonexistent/web")
	if final.StopReason != want {
		t.Fatalf("stop reason %q, want %q", final.StopReason, want)
	}
}
