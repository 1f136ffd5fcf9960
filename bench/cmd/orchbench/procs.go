package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a process has to exit after SIGTERM before it
// is killed.
const stopGrace = 10 * time.Second

// proc is one process the benchmark started.
type proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

// procs starts processes and ends every one of them at cleanup, whatever
// happened in between. Each runs in its own process group (so that
// ending it ends its children) and receives SIGKILL if the benchmark
// itself dies (Pdeathsig), so a crashed or killed benchmark leaves no
// servers behind.
type procs struct {
	dir   string
	runID string

	mu      sync.Mutex
	all     []*proc
	scratch []string // directories removed at cleanup
}

func newProcs(dir, runID string) *procs { return &procs{dir: dir, runID: runID} }

// start runs bin with args, its output going to DIR/name.log.
func (ps *procs) start(name, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(ps.dir, name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.all = append(ps.all, p)
	ps.mu.Unlock()
	return p, nil
}

// cleanup stops every process still running, the latest started first,
// then kills any task process of this run that outlived its agent.
func (ps *procs) cleanup() {
	ps.mu.Lock()
	all := ps.all
	ps.all = nil
	ps.mu.Unlock()
	var wg sync.WaitGroup
	for i := len(all) - 1; i >= 0; i-- {
		wg.Add(1)
		go func(p *proc) {
			defer wg.Done()
			p.stop()
		}(all[i])
	}
	wg.Wait()
	ps.mu.Lock()
	for _, dir := range ps.scratch {
		_ = os.RemoveAll(dir)
	}
	ps.scratch = nil
	ps.mu.Unlock()
	if n := killMarked(ps.runID); n > 0 {
		fmt.Fprintf(os.Stderr, "orchbench: killed %d leftover task processes of this run\n", n)
	}
}

// scratchDir makes a directory for what a process named name keeps only
// while it runs: on the machine's tmpfs (/dev/shm) if it has one, else in
// the working directory. Cleanup removes it.
func (ps *procs) scratchDir(name string) (string, error) {
	if st, err := os.Stat("/dev/shm"); err != nil || !st.IsDir() {
		return filepath.Join(ps.dir, name), nil
	}
	dir, err := os.MkdirTemp("/dev/shm", "orchbench-"+name+"-*")
	if err != nil {
		return "", err
	}
	ps.mu.Lock()
	ps.scratch = append(ps.scratch, dir)
	ps.mu.Unlock()
	return dir, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after stopGrace.
func (p *proc) stop() {
	if !p.running() {
		return
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		p.kill()
	}
}

// kill sends SIGKILL to the process group and waits for the process.
func (p *proc) kill() {
	if !p.running() {
		return
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	<-p.done
}

// memStatus reads VmRSS and VmHWM (peak RSS) from /proc/PID/status, in
// bytes.
func memStatus(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
	}
	return rss, hwm, nil
}

// taskMark is the environment variable every task process of a run
// carries (exec-driver tasks and the os/exec peer's alike), so that any
// left behind by a failure can be found and killed.
const taskMark = "ORCHBENCH_RUN"

// killMarked kills every process whose environment holds
// ORCHBENCH_RUN=runID, and returns how many it found. The environment
// survives exec, so it marks the process whatever it runs.
func killMarked(runID string) int {
	want := []byte("\x00" + taskMark + "=" + runID + "\x00")
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !bytes.Contains(append(append([]byte{0}, env...), 0), want) {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}
