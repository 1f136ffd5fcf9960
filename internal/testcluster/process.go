package testcluster

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one run of the trellis binary with fixed arguments, which can
// be started again after it ended: servers and agents are restarted on the
// same data directory to test what survives.
type process struct {
	name    string
	bin     string
	args    []string
	logPath string // stdout and stderr, appended across restarts

	// mu guards cmd and done: a test restarts a process while others
	// (a history recorder, a client) ask whether it runs.
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// current is the process's latest run: its command and done channel.
func (p *process) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

// Start runs the process (again, after Kill or Stop, or after it exited).
func (p *process) Start() error {
	if p.Running() {
		return fmt.Errorf("start %s: already running", p.name)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	return nil
}

// Running reports whether the process is alive.
func (p *process) Running() bool {
	_, done := p.current()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Done is closed when the process has exited (and been waited for). It is
// nil before the first Start; each Start makes a new one.
func (p *process) Done() <-chan struct{} {
	_, done := p.current()
	return done
}

// Kill ends the process with SIGKILL and waits for it.
func (p *process) Kill() {
	if !p.Running() {
		return
	}
	cmd, done := p.current()
	_ = cmd.Process.Kill()
	<-done
}

// Stop ends the process with SIGTERM, then SIGKILL after 10 s.
func (p *process) Stop() {
	if !p.Running() {
		return
	}
	cmd, done := p.current()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused process handles the SIGTERM once it runs
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.Kill()
	}
}

// Pause freezes the process with SIGSTOP: it keeps its state and its
// connections but does nothing, as if cut off from the network. Resume
// (SIGCONT) lets it run on; Kill and Stop end it paused or not.
func (p *process) Pause() error {
	if !p.Running() {
		return fmt.Errorf("pause %s: not running", p.name)
	}
	cmd, _ := p.current()
	return cmd.Process.Signal(syscall.SIGSTOP)
}

// Resume continues a paused process.
func (p *process) Resume() error {
	if !p.Running() {
		return fmt.Errorf("resume %s: not running", p.name)
	}
	cmd, _ := p.current()
	return cmd.Process.Signal(syscall.SIGCONT)
}

// PID is the process id of the running (or last) process.
func (p *process) PID() int {
	cmd, _ := p.current()
	return cmd.Process.Pid
}

// RSS reads the process's resident set size from /proc.
func (p *process) RSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.PID()))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", p.PID())
}
