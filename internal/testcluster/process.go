package testcluster

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
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

	cmd  *exec.Cmd
	done chan struct{}
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
	p.cmd, p.done = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return nil
}

// Running reports whether the process is alive.
func (p *process) Running() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Done is closed when the process has exited (and been waited for). It is
// nil before the first Start; each Start makes a new one.
func (p *process) Done() <-chan struct{} { return p.done }

// Kill ends the process with SIGKILL and waits for it.
func (p *process) Kill() {
	if !p.Running() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop ends the process with SIGTERM, then SIGKILL after 10 s.
func (p *process) Stop() {
	if !p.Running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // a paused process handles the SIGTERM once it runs
	select {
	case <-p.done:
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
	return p.cmd.Process.Signal(syscall.SIGSTOP)
}

// Resume continues a paused process.
func (p *process) Resume() error {
	if !p.Running() {
		return fmt.Errorf("resume %s: not running", p.name)
	}
	return p.cmd.Process.Signal(syscall.SIGCONT)
}

// PID is the process id of the running (or last) process.
func (p *process) PID() int { return p.cmd.Process.Pid }

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
