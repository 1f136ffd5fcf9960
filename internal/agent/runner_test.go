package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/orchestrator"
)

// procTable holds the processes the tests' runners start, outliving any
// one agent: it is what lets a runner made by a restarted agent find the
// processes an earlier one started (as the exec driver finds them by pid).
type procTable struct {
	mu     sync.Mutex
	procs  map[int]*proc
	starts atomic.Int32 // Run with no state
	resume atomic.Int32 // Run with a saved state
}

type proc struct {
	pid  int
	done chan struct{}
	code int // set before done closes
}

func newProcTable(t *testing.T) *procTable {
	pt := &procTable{procs: make(map[int]*proc)}
	t.Cleanup(pt.killAll)
	return pt
}

func (pt *procTable) killAll() {
	pt.mu.Lock()
	var ps []*proc
	for _, p := range pt.procs {
		ps = append(ps, p)
	}
	pt.mu.Unlock()
	for _, p := range ps {
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		<-p.done
	}
}

func (pt *procTable) start(spec driver.Spec) (*proc, error) {
	cmd := exec.Command(spec.Command[0], spec.Command[1:]...)
	for k, v := range spec.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "PATH="+os.Getenv("PATH"))
	cmd.Dir = spec.TaskDir
	stdout, err := os.OpenFile(filepath.Join(spec.LogDir, spec.Container+".stdout"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer stdout.Close()
	stderr, err := os.OpenFile(filepath.Join(spec.LogDir, spec.Container+".stderr"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{pid: cmd.Process.Pid, done: make(chan struct{})}
	pt.mu.Lock()
	pt.procs[p.pid] = p
	pt.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		p.code = ws.ExitStatus()
		if ws.Signaled() {
			p.code = 128 + int(ws.Signal())
		}
		close(p.done)
	}()
	return p, nil
}

func (pt *procTable) find(pid int) *proc {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return pt.procs[pid]
}

func (pt *procTable) newRunner(rc RunnerConfig) (TaskRunner, error) {
	return &shRunner{rc: rc, pt: pt, stop: make(chan struct{})}, nil
}

// shRunner is the tests' TaskRunner: every container is a real process,
// all started at once; the task stops when one exits or on Stop (SIGTERM
// to each process group, SIGKILL after two seconds). It has none of the
// lifecycle's ordering, health or restarts: those are not the agent's.
type shRunner struct {
	rc   RunnerConfig
	pt   *procTable
	stop chan struct{}
	once sync.Once
	mu   sync.Mutex
	why  string
}

// shState is what the runner saves: its processes.
type shState struct {
	PIDs    map[string]int       `json:"pids"`
	Started map[string]time.Time `json:"started"`
}

func (r *shRunner) Stop(reason string) {
	r.once.Do(func() {
		r.mu.Lock()
		r.why = reason
		r.mu.Unlock()
		close(r.stop)
	})
}

func (r *shRunner) Run(ctx context.Context, saved json.RawMessage) error {
	defs := r.rc.Definition.GetContainers()
	st := shState{PIDs: map[string]int{}, Started: map[string]time.Time{}}
	procs := make(map[string]*proc)
	if saved == nil {
		r.pt.starts.Add(1)
		for _, c := range defs {
			p, err := r.pt.start(r.rc.DriverSpec(c))
			if err != nil {
				for _, q := range procs {
					_ = syscall.Kill(-q.pid, syscall.SIGKILL)
				}
				r.report(st, procs, orchestrator.StatusStopped, fmt.Sprintf("container %s cannot start: %v", c.GetName(), err))
				return nil
			}
			procs[c.GetName()] = p
			st.PIDs[c.GetName()] = p.pid
			st.Started[c.GetName()] = r.rc.Clock.Now()
		}
	} else {
		r.pt.resume.Add(1)
		if err := json.Unmarshal(saved, &st); err != nil {
			return fmt.Errorf("saved state: %w", err)
		}
		for name, pid := range st.PIDs {
			if p := r.pt.find(pid); p != nil {
				procs[name] = p
			}
		}
	}
	r.report(st, procs, orchestrator.StatusRunning, "")

	exited := make(chan string, len(procs))
	quit := make(chan struct{})
	defer close(quit)
	for name, p := range procs {
		go func() {
			select {
			case <-p.done:
				exited <- name
			case <-quit:
			}
		}()
	}
	if len(procs) < len(defs) {
		exited <- "(gone)"
	}
	var reason string
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-r.stop:
		r.mu.Lock()
		reason = r.why
		r.mu.Unlock()
	case name := <-exited:
		if p := procs[name]; p != nil {
			reason = fmt.Sprintf("essential container %s exited with code %d", name, p.code)
		} else {
			reason = "a container was gone after the agent restarted"
		}
	}
	r.report(st, procs, orchestrator.StatusRunning, reason) // stopping
	for _, p := range procs {
		_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(2 * time.Second):
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
			<-p.done
		}
	}
	r.report(st, procs, orchestrator.StatusStopped, reason)
	return nil
}

// report sends a snapshot: status of the task, each container running or
// exited as its process is.
func (r *shRunner) report(st shState, procs map[string]*proc, status, reason string) {
	b, _ := json.Marshal(st)
	s := Snapshot{Status: status, StopReason: reason, State: b}
	now := r.rc.Clock.Now()
	for _, c := range r.rc.Definition.GetContainers() {
		name := c.GetName()
		cs := ContainerStatus{Name: name, Status: orchestrator.StatusPending, StartedAt: st.Started[name]}
		if p := procs[name]; p != nil {
			cs.RuntimeID = fmt.Sprint(p.pid)
			cs.Status = orchestrator.StatusRunning
			select {
			case <-p.done:
				code := p.code
				cs.Status, cs.ExitCode, cs.FinishedAt = orchestrator.StatusStopped, &code, now
			default:
			}
		} else if st.PIDs[name] != 0 || status == orchestrator.StatusStopped {
			cs.Status = orchestrator.StatusStopped
		}
		s.Containers = append(s.Containers, cs)
	}
	first := time.Time{}
	for _, t := range st.Started {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	s.StartedAt = first
	if reason != "" {
		s.StoppingAt = now
	}
	if status == orchestrator.StatusStopped {
		s.StoppedAt = now
	}
	r.rc.Report(s)
}

func (r *shRunner) Logs(ctx context.Context, container string, stream driver.Stream, follow bool) (io.ReadCloser, error) {
	f, err := os.Open(filepath.Join(r.rc.LogDir, container+"."+string(stream)))
	if err != nil {
		return nil, err
	}
	if !follow {
		return f, nil
	}
	return &followReader{ctx: ctx, f: f}, nil
}

// followReader reads a file that grows, until ctx ends.
type followReader struct {
	ctx context.Context
	f   *os.File
}

func (r *followReader) Read(p []byte) (int, error) {
	for {
		n, err := r.f.Read(p)
		if n > 0 || !errors.Is(err, io.EOF) {
			return n, err
		}
		select {
		case <-r.ctx.Done():
			return 0, io.EOF
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (r *followReader) Close() error { return r.f.Close() }
