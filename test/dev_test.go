//go:build linux

package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"trellis.dev/trellis/internal/tasknet"
	"trellis.dev/trellis/internal/testcluster"
	"trellis.dev/trellis/internal/testcluster/dockerhost"
)

// `trellis dev` in memory must leave nothing behind however it ends: these
// tests end a real dev in every way a user's session does and count what
// is left of its tasks (exec processes, docker containers, bridge
// networks: namespace, veth, iptables rules, lease) and of its temporary
// directory. Docker and bridge tasks are part of it where the host has the
// engine and the CNI plugins (CI requires both: TRELLIS_REQUIRE_DOCKER,
// TRELLIS_REQUIRE_CNI).

// devTasks are the tasks each dev of these tests runs on dev-1.
const (
	devSleeper = `family: sleeper
containers:
  - {name: main, driver: exec, command: [sleep, "1000"], stop_timeout: 5s}
`
	// devStubborn ignores SIGTERM (an ignored signal stays ignored across
	// exec, so sleep ignores it too): only a SIGKILL ends it.
	devStubborn = `family: stubborn
containers:
  - {name: main, driver: exec, command: [/bin/sh, -c, "trap '' TERM; while :; do sleep 1; done"], stop_timeout: 10m}
`
	devForked = `family: forked
containers:
  - {name: main, driver: exec, command: [/bin/sh, -c, "sleep 1000 & wait"], stop_timeout: 5s}
`
	devBridge = `family: bridged
network: bridge
containers:
  - {name: main, driver: exec, command: [sleep, "1000"], stop_timeout: 5s}
`
	devDocker = `family: boxed
containers:
  - {name: main, driver: docker, image: %s, stop_timeout: 5s}
`
)

// devHost is what the host offers these tests: docker (nil without an
// engine) and bridge networking (bridge "" without the CNI plugins).
type devHost struct {
	bin, dir string
	docker   *dockerhost.Engine
	image    string
	// bridge and subnet are this test's own, shared by its devs.
	bridge, subnet string
}

// devTemp is a TMPDIR for a dev: short, since an agent's control socket
// lies below it and a socket's path has at most 107 bytes.
func devTemp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tdev")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func newDevHost(t *testing.T) *devHost {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process test")
	}
	dir := t.TempDir()
	h := &devHost{bin: trellisBinary(t), dir: dir}
	h.docker, h.image = probeDocker(t)
	if h.docker != nil {
		t.Cleanup(func() { h.docker.Close() })
	}
	if reason := cniMissing(); reason != "" {
		if os.Getenv("TRELLIS_REQUIRE_CNI") != "" {
			t.Fatalf("TRELLIS_REQUIRE_CNI is set, but: %s", reason)
		}
		t.Logf("bridge tasks skipped: %s", reason)
	} else {
		h.bridge = "trdev" + randomSuffix(t)[:6]
		h.subnet = fmt.Sprintf("10.252.%d.0/24", rand.IntN(256))
		t.Cleanup(func() { _ = exec.Command("ip", "link", "del", h.bridge).Run() })
	}
	return h
}

// devProc is one `trellis dev` process, its stdout and stderr one pipe, as
// in `trellis dev 2>&1 | tee log`.
type devProc struct {
	t      *testing.T
	h      *devHost
	cmd    *exec.Cmd
	out    *os.File // the pipe's read end
	tmp    string   // its TMPDIR
	e      *orchEnv
	exited chan struct{}

	mu   sync.Mutex
	text strings.Builder
}

// startDev starts dev with TMPDIR tmp and one instance, and waits for its
// banner; through the shell command wrap ("$@" is dev) when set.
func (h *devHost) startDev(t *testing.T, tmp string, wrap ...string) *devProc {
	t.Helper()
	args := []string{"dev", "-http-addr", "127.0.0.1:0", "-grpc-addr", "127.0.0.1:0", "-raft-addr", "127.0.0.1:0", "-dns-addr", "127.0.0.1:0", "-log-level", "info"}
	if h.bridge != "" {
		args = append(args, "-bridge-name", h.bridge, "-bridge-subnet", h.subnet)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(h.bin, args...)
	if len(wrap) > 0 {
		cmd = exec.Command("/bin/sh", append([]string{"-c", wrap[0], "sh", h.bin}, args...)...)
	}
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	d := &devProc{t: t, h: h, cmd: cmd, out: r, tmp: tmp, exited: make(chan struct{})}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			d.mu.Lock()
			d.text.Write(buf[:n])
			d.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-d.exited
		r.Close()
		if t.Failed() {
			t.Logf("--- dev %d output ---\n%s", cmd.Process.Pid, tail([]byte(d.output()), 8000))
		}
	})
	m := d.waitOutput("its banner", regexp.MustCompile(`HTTP API:\s+http://(127\.0\.0\.1:\d+)`))
	d.e = &orchEnv{t: t, bin: h.bin, dir: h.dir, server: &testcluster.Member{HTTPAddr: m[1]}}
	d.e.waitInstance("dev-1", "registers ready", func(in instanceJSON) bool { return in.Data.Status == "ready" })
	return d
}

func (d *devProc) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.text.String()
}

// waitOutput waits until dev has printed what re matches.
func (d *devProc) waitOutput(what string, re *regexp.Regexp) []string {
	d.t.Helper()
	var m []string
	exited := false
	if pollUntil(d.t.Context(), waitLimit, func() bool {
		m = re.FindStringSubmatch(d.output())
		select {
		case <-d.exited:
			exited = true
		default:
		}
		return m != nil || exited
	}) != nil || m == nil {
		d.t.Fatalf("dev never printed %s (%s); exited: %v", what, re, exited)
	}
	return m
}

// runDir is dev's run directory under its TMPDIR, the value of its
// containers' trellis.dev_run label.
func (d *devProc) runDir() string {
	d.t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(d.tmp, "trellis-dev-*"))
	if len(dirs) != 1 {
		d.t.Fatalf("dev's run directories: %v, want one", dirs)
	}
	return dirs[0]
}

// devLeft is what a dev's tasks hold on the host, to be counted gone.
type devLeft struct {
	procs    []procID
	networks []networkJSON
	uids     []string
	runs     []string
}

// runTasks runs the tasks the host allows on dev-1 and returns what they
// hold; stubborn adds one that ignores SIGTERM.
func (d *devProc) runTasks(stubborn bool) devLeft {
	d.t.Helper()
	e := d.e
	left := devLeft{runs: []string{d.runDir()}}
	specs := map[string]string{"sleeper": devSleeper}
	if stubborn {
		specs["stubborn"] = devStubborn
	}
	if d.h.bridge != "" {
		specs["bridged"] = devBridge
	}
	if d.h.docker != nil {
		specs["boxed"] = fmt.Sprintf(devDocker, d.h.image)
	}
	for family, spec := range specs {
		e.register(family+".yaml", spec)
		name := e.run(family, "dev-1")
		tk := e.waitRunning(name)
		left.uids = append(left.uids, e.taskUID(name))
		if family == "boxed" {
			continue
		}
		left.procs = append(left.procs, e.trackPIDs(tk)...)
		if family == "bridged" {
			left.networks = append(left.networks, tk.Data.Network)
		}
	}
	return left
}

// signal sends sig to dev.
func (d *devProc) signal(sig syscall.Signal) {
	d.t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		d.t.Fatalf("signal %v: %v", sig, err)
	}
}

// waitExit waits for dev to exit.
func (d *devProc) waitExit() {
	d.t.Helper()
	select {
	case <-d.exited:
	case <-time.After(waitLimit):
		d.t.Fatalf("dev did not exit within %v", waitLimit)
	}
}

// checkGone counts what is left of the tasks and the runs: nothing may be.
func (h *devHost) checkGone(t *testing.T, left devLeft) {
	t.Helper()
	for _, p := range left.procs {
		if err := pollUntil(t.Context(), waitLimit, func() bool { return !p.alive() && groupGone(p.pid) }); err != nil {
			t.Errorf("process %d (%s) or its group still runs", p.pid, p.what)
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, run := range left.runs {
		if _, err := os.Stat(run); err == nil {
			t.Errorf("run directory left: %s", run)
		}
		for line := range strings.SplitSeq(string(mounts), "\n") {
			if strings.Contains(line, run+"/") {
				t.Errorf("mount left: %s", line)
			}
		}
	}
	if h.docker != nil {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		for _, run := range left.runs {
			ids, err := h.docker.Containers(ctx, "trellis.dev_run="+run)
			if err != nil || len(ids) > 0 {
				t.Errorf("containers of run %s left: %v, %v", run, ids, err)
			}
		}
	}
	if h.bridge != "" && len(left.networks) > 0 {
		if out, _ := exec.Command("ip", "-o", "link", "show", "master", h.bridge).Output(); strings.TrimSpace(string(out)) != "" {
			t.Errorf("veths left on %s:\n%s", h.bridge, out)
		}
		rules, _ := exec.Command("iptables-save").Output()
		for line := range strings.SplitSeq(string(rules), "\n") {
			for _, uid := range left.uids {
				if strings.Contains(line, uid) {
					t.Errorf("iptables rule of task %s left: %s", uid, line)
				}
			}
			for _, n := range left.networks {
				if n.Address != "" && strings.Contains(line, n.Address+"/32") {
					t.Errorf("iptables rule of %s left: %s", n.Address, line)
				}
			}
		}
	}
}

// Dev ended by SIGHUP (its terminal closed), by SIGPIPE (the reader of its
// output gone, as `trellis dev | tee` after Ctrl-C), and by Ctrl-C twice
// while a task that ignores SIGTERM holds the stop: each time every task
// is stopped and nothing is left. Started with SIGHUP ignored (nohup), it
// stays. Killed, it leaves nothing the next dev does not remove. Two devs
// share a Docker engine.
func TestDevLeavesNothingBehind(t *testing.T) {
	h := newDevHost(t)
	t.Run("SIGHUP", func(t *testing.T) {
		tmp := devTemp(t)
		d := h.startDev(t, tmp)
		left := d.runTasks(false)
		d.signal(syscall.SIGHUP)
		d.waitExit()
		h.checkGone(t, left)
		noRunDirs(t, tmp)
	})
	t.Run("SIGPIPE", func(t *testing.T) {
		tmp := devTemp(t)
		d := h.startDev(t, tmp)
		left := d.runTasks(false)
		// The reader goes; dev's next write (its logs, as it stops) fails
		// with EPIPE and raises SIGPIPE again.
		d.out.Close()
		d.signal(syscall.SIGPIPE)
		d.waitExit()
		h.checkGone(t, left)
		noRunDirs(t, tmp)
	})
	t.Run("nohup", func(t *testing.T) {
		// Started with SIGHUP ignored, as nohup does, dev outlives its
		// terminal: the SIGHUP is dropped, the SIGINT after it stops dev.
		tmp := devTemp(t)
		d := h.startDev(t, tmp, `trap '' HUP; exec "$@"`)
		e := d.e
		e.register("sleeper.yaml", devSleeper)
		left := devLeft{runs: []string{d.runDir()}, procs: e.trackPIDs(e.waitRunning(e.run("sleeper", "dev-1")))}
		d.signal(syscall.SIGHUP)
		d.signal(syscall.SIGINT)
		d.waitOutput("that an interrupt stops it", regexp.MustCompile(`(hangup|interrupt): stopping every task`))
		if strings.Contains(d.output(), "hangup: stopping") {
			t.Errorf("dev started with SIGHUP ignored stopped on a SIGHUP")
		}
		d.waitExit()
		h.checkGone(t, left)
		noRunDirs(t, tmp)
	})
	t.Run("double SIGINT", func(t *testing.T) {
		tmp := devTemp(t)
		d := h.startDev(t, tmp)
		left := d.runTasks(true)
		d.signal(syscall.SIGINT)
		// The stubborn task holds the stop for its 10m stop timeout, and
		// dev says so.
		d.waitOutput("which task it waits for", regexp.MustCompile(`Waiting for task default/\S+ to stop .*up to 10m0s`))
		d.signal(syscall.SIGINT)
		d.waitOutput("that it kills the tasks", regexp.MustCompile(`Second interrupt: killing the tasks`))
		d.waitExit()
		h.checkGone(t, left)
		noRunDirs(t, tmp)
	})
	// One binary, one probe image, one bridge for all the ways to end.
	t.Run("SIGKILL, then the next dev", func(t *testing.T) { testDevKilledIsSweptByTheNext(t, h) })
	t.Run("two devs on one Docker engine", func(t *testing.T) { testTwoDevsShareADockerEngine(t, h) })
}

// Dev killed with SIGKILL: its exec tasks die with it (a parent-death
// signal); its containers and bridge networks stay, marked with its run,
// until the next dev removes them as it starts.
func testDevKilledIsSweptByTheNext(t *testing.T, h *devHost) {
	tmp := devTemp(t)
	d := h.startDev(t, tmp)
	left := d.runTasks(false)
	// A task whose shell leaves a job in the background: the parent-death
	// signal reaches the shell only.
	d.e.register("forked.yaml", devForked)
	forked := d.e.trackPIDs(d.e.waitRunning(d.e.run("forked", "dev-1")))
	left.procs = append(left.procs, forked...)
	d.signal(syscall.SIGKILL)
	d.waitExit()
	for _, p := range left.procs {
		if err := pollUntil(t.Context(), waitLimit, func() bool { return !p.alive() }); err != nil {
			t.Errorf("process %d (%s) survives its dev's SIGKILL", p.pid, p.what)
		}
	}
	if groupGone(forked[0].pid) {
		t.Fatalf("the forked task's background job died with dev: the sweep of process groups proves nothing")
	}
	if h.docker != nil {
		ids, err := h.docker.Containers(t.Context(), "trellis.dev_run="+left.runs[0])
		if err != nil || len(ids) == 0 {
			t.Fatalf("the killed dev's containers: %v, %v; want them still there for the sweep to prove itself", ids, err)
		}
	}
	// The next dev sweeps what the killed one left, before its banner:
	// containers, networks, the background job.
	next := h.startDev(t, tmp)
	h.checkGone(t, left)
	if !strings.Contains(next.output(), "removed what earlier runs of trellis dev left behind") {
		t.Errorf("the next dev did not say it removed the killed one's leftovers")
	}
	next.signal(syscall.SIGINT)
	next.waitExit()
}

// Two devs on one Docker engine, both with an instance dev-1: the second
// one's agent, sweeping the containers of dev-1 it does not know as it
// starts, leaves the first one's alone, and each dev's end removes only
// its own.
func testTwoDevsShareADockerEngine(t *testing.T, h *devHost) {
	if h.docker == nil {
		t.Skip("needs a Docker engine")
	}
	hc := *h
	h = &hc
	h.bridge = "" // this is about containers only
	first := h.startDev(t, devTemp(t))
	first.e.register("boxed.yaml", fmt.Sprintf(devDocker, h.image))
	firstTask := first.e.run("boxed", "dev-1")
	firstID := first.e.waitRunning(firstTask).Data.Containers[0].RuntimeID

	second := h.startDev(t, devTemp(t))
	// A task that runs on the second dev-1 means its agent's start-up
	// sweep is over: it runs before any task starts.
	second.e.register("boxed.yaml", fmt.Sprintf(devDocker, h.image))
	secondTask := second.e.run("boxed", "dev-1")
	secondID := second.e.waitRunning(secondTask).Data.Containers[0].RuntimeID
	if running, err := h.docker.Running(t.Context(), firstID); err != nil || !running {
		t.Fatalf("the first dev's container %s after the second dev started: running %v, %v", firstID, running, err)
	}
	if tk := first.e.task(firstTask); tk.Data.LastStatus != "RUNNING" {
		t.Fatalf("the first dev's task after the second dev started: %+v", tk.Data)
	}

	second.signal(syscall.SIGINT)
	second.waitExit()
	if running, err := h.docker.Running(t.Context(), secondID); err != nil || running {
		t.Errorf("the second dev's container after it stopped: running %v, %v", running, err)
	}
	if running, err := h.docker.Running(t.Context(), firstID); err != nil || !running {
		t.Fatalf("the first dev's container after the second stopped: running %v, %v", running, err)
	}
	first.signal(syscall.SIGINT)
	first.waitExit()
	if running, err := h.docker.Running(t.Context(), firstID); err != nil || running {
		t.Errorf("the first dev's container after it stopped: running %v, %v", running, err)
	}
}

// noRunDirs checks that no run directory is left in tmp.
func noRunDirs(t *testing.T, tmp string) {
	t.Helper()
	if dirs, _ := filepath.Glob(filepath.Join(tmp, "trellis-dev-*")); len(dirs) > 0 {
		t.Errorf("run directories left: %v", dirs)
	}
}

// cniMissing says why bridge tasks cannot run here, "" when they can.
func cniMissing() string {
	if os.Geteuid() != 0 {
		return "needs root: bridge tasks make network namespaces"
	}
	if err := tasknet.Probe(tasknet.DefaultConfig("/")); err != nil {
		return err.Error()
	}
	return ""
}
