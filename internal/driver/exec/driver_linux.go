package exec

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	osexec "os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/netns"
)

// cgroups probes the host once and notes, once, what is not enforced.
func (d *Driver) cgroups() cgroups {
	d.cgOnce.Do(func() {
		d.cg = probeCgroups(d.cfg.CgroupRoot, d.cfg.CgroupParent)
		switch {
		case d.cg.note == "":
			d.log.Info("containers run in cgroups with limits", "cgroups", d.cg.describe())
		case d.cg.cpu || d.cg.memory:
			d.log.Warn("some container limits are not enforced on this host", "cgroups", d.cg.describe())
		default:
			d.log.Warn("containers run without cpu and memory limits on this host", "cgroups", d.cg.describe())
		}
	})
	return d.cg
}

// Fingerprint: the driver runs on any Linux host; Detail gives the kernel
// and whether cgroup limits are enforced.
func (d *Driver) Fingerprint(ctx context.Context) driver.Fingerprint {
	kernel := "linux"
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		kernel += " " + unix.ByteSliceToString(u.Release[:])
	}
	return driver.Fingerprint{Available: true, Detail: kernel + "; " + d.cgroups().describe()}
}

// Start runs spec.Command as a new process group, in its own cgroup when
// the host allows, with its output appended to the log files. It returns
// once the process runs, or an error naming what could not be started and
// why. Nothing ties the process to the agent: no pipes, no parent-death
// signal (unless DieWithAgent), so it survives an agent restart.
func (d *Driver) Start(ctx context.Context, spec driver.Spec) (driver.Handle, error) {
	if err := ctx.Err(); err != nil {
		return driver.Handle{}, err
	}
	if err := checkSpec(spec); err != nil {
		return driver.Handle{}, err
	}
	dir := workingDir(spec)
	field := "working_dir"
	if spec.WorkingDir == "" {
		field = "task_dir"
	}
	if err := checkDir(field, dir); err != nil {
		return driver.Handle{}, err
	}
	env, err := buildEnv(spec.Env, os.Getenv("PATH"))
	if err != nil {
		return driver.Handle{}, err
	}
	path, err := resolveCommand(spec.Command[0], envValue(env, "PATH"), dir)
	if err != nil {
		return driver.Handle{}, err
	}

	if err := os.MkdirAll(spec.LogDir, 0o755); err != nil {
		return driver.Handle{}, fmt.Errorf("log_dir: %w", err)
	}
	st := handleState{
		Stdout: logPath(spec.LogDir, spec.Container, driver.Stdout),
		Stderr: logPath(spec.LogDir, spec.Container, driver.Stderr),
		Dir:    dir,
		Env:    env,
		Netns:  spec.Netns,
		Cred:   credentialOf(spec, os.Getuid(), os.Getgid()),
	}
	stdout, err := openLog(st.Stdout)
	if err != nil {
		return driver.Handle{}, err
	}
	defer stdout.Close()
	stderr, err := openLog(st.Stderr)
	if err != nil {
		return driver.Handle{}, err
	}
	defer stderr.Close()

	cmd := &osexec.Cmd{
		Path:   path,
		Args:   spec.Command,
		Env:    env,
		Dir:    dir,
		Stdout: stdout, // *os.File: handed to the child as is, no copying goroutine
		Stderr: stderr,
		// Stdin nil: the child reads /dev/null.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Credential: st.Cred.sysCredential()},
	}
	cg := d.cgroups()
	if cg.parent != "" {
		group, fd, err := cg.create(cgroupName(spec.TaskUID, spec.TaskID, spec.Container, randomSuffix()), spec.CPUMillis, spec.MemoryBytes)
		if err != nil {
			return driver.Handle{}, err
		}
		defer unix.Close(fd)
		st.Cgroup = group
		// clone3(CLONE_INTO_CGROUP): the child is in its group from its
		// first instruction, so not even an exec'd shell runs unlimited.
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = fd
	}

	started := time.Now()
	start := startIn
	if d.cfg.DieWithAgent {
		cmd.SysProcAttr.Pdeathsig = unix.SIGKILL
		start = d.forker.start
	}
	if err := start(spec.Netns, cmd); err != nil {
		d.dropCgroup(st.Cgroup)
		return driver.Handle{}, err
	}
	pid := cmd.Process.Pid
	// Until cmd.Wait the child cannot be reaped, so its pid and /proc
	// entry are surely its own while we read them.
	ps, err := readProcStat(pid)
	var pidfd int
	if err == nil {
		pidfd, err = unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	}
	if err != nil {
		_ = unix.Kill(-pid, unix.SIGKILL)
		_ = cmd.Wait()
		d.dropCgroup(st.Cgroup)
		return driver.Handle{}, fmt.Errorf("command: watch pid %d: %w", pid, err)
	}
	st.StartTicks = ps.StartTicks
	if err := d.logGroup(pid, ps.StartTicks); err != nil {
		unix.Close(pidfd)
		_ = unix.Kill(-pid, unix.SIGKILL)
		_ = cmd.Wait()
		d.dropCgroup(st.Cgroup)
		return driver.Handle{}, err
	}
	h, err := encodeHandle(pid, started, st)
	if err != nil {
		unix.Close(pidfd)
		_ = unix.Kill(-pid, unix.SIGKILL)
		_ = cmd.Wait()
		d.dropCgroup(st.Cgroup)
		return driver.Handle{}, err
	}
	c := &container{pid: pid, st: st, done: make(chan struct{})}
	d.track(c)
	go d.watch(c, pidfd, func() driver.Exit { return exitOf(cmd.Wait(), cmd.ProcessState) })
	go d.rotateLoop(c)
	d.log.Debug("started", "task", spec.TaskID, "container", spec.Container, "pid", pid, "cgroup", st.Cgroup)
	return h, nil
}

// startIn starts cmd, in the network namespace at netnsPath when it is
// set: the child is forked from a thread that is in the namespace, so it
// is in the namespace from its first instruction, as are the processes it
// starts.
func startIn(netnsPath string, cmd *osexec.Cmd) error {
	if netnsPath == "" {
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("command: start %s: %w", cmd.Path, err)
		}
		return nil
	}
	err := netns.Do(netnsPath, cmd.Start)
	if ee := (*netns.EnterError)(nil); errors.As(err, &ee) {
		return fmt.Errorf("netns: the task's network namespace: %w", err)
	}
	if err != nil {
		return fmt.Errorf("command: start %s: %w", cmd.Path, err)
	}
	return nil
}

func (d *Driver) dropCgroup(dir string) {
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := removeCgroup(ctx, dir); err != nil {
		d.log.Warn("cannot remove cgroup", "cgroup", dir, "err", err)
	}
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// watch waits for the process to exit, records how, and closes c.done.
// reap collects the exit status: cmd.Wait for our own child, nothing to
// collect for a recovered process.
func (d *Driver) watch(c *container, pidfd int, reap func() driver.Exit) {
	err := waitPidfd(pidfd)
	exit := reap()
	if err != nil && exit.Err == nil && exit.Code == -1 {
		exit.Err = err
	}
	if c.st.Cgroup != "" && oomKilled(c.st.Cgroup) {
		exit.OOMKilled = true
	}
	c.exit = exit
	close(c.done)
	d.log.Debug("exited", "pid", c.pid, "code", exit.Code, "signal", exit.Signal, "oom", exit.OOMKilled)
}

// exitOf turns a child's wait result into an Exit. A process killed by a
// signal gets code 128+signal, as a shell and Docker report it.
func exitOf(waitErr error, ps *os.ProcessState) driver.Exit {
	if ps == nil {
		return driver.Exit{Code: -1, Err: waitErr}
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		return driver.Exit{Code: ps.ExitCode()}
	case ws.Signaled():
		return driver.Exit{Code: 128 + int(ws.Signal()), Signal: ws.Signal()}
	default:
		return driver.Exit{Code: ws.ExitStatus()}
	}
}

// unknownExit is how a recovered process ends: it was not our child, so
// its status went to its new parent.
func unknownExit() driver.Exit { return driver.Exit{Code: -1} }

// Wait blocks until the process exits or ctx ends. A handle this Driver
// neither started nor recovered is recovered first; if its process is gone
// (or its pid reused), Wait returns at once with Code -1 and Exit.Err
// wrapping driver.ErrGone. The error result is ctx's error, or the reason
// a damaged handle cannot be read.
func (d *Driver) Wait(ctx context.Context, h driver.Handle) (driver.Exit, error) {
	pid, st, err := decodeHandle(h)
	if err != nil {
		return driver.Exit{Code: -1, Err: err}, err
	}
	c := d.tracked(pid, st)
	if c == nil {
		if err := d.attach(pid, st); err != nil {
			if errors.Is(err, driver.ErrGone) {
				return driver.Exit{Code: -1, Err: err}, nil
			}
			return driver.Exit{Code: -1, Err: err}, err
		}
		if c = d.tracked(pid, st); c == nil {
			// Destroyed in between.
			return driver.Exit{Code: -1, Err: driver.ErrGone}, nil
		}
	}
	select {
	case <-c.done:
		return c.exit, nil
	case <-ctx.Done():
		return driver.Exit{}, ctx.Err()
	}
}

// Signal sends sig to the container's process group, kill(-pgid, sig),
// which reaches the children of the child too. A SIGKILL also kills the
// whole cgroup, which catches processes that left the group. Signalling a
// process that has exited is not an error, and a pid that now belongs to
// another process is left alone.
func (d *Driver) Signal(ctx context.Context, h driver.Handle, sig syscall.Signal) error {
	pid, st, err := decodeHandle(h)
	if err != nil {
		return err
	}
	ps, err := readProcStat(pid)
	switch {
	case err == nil && ps.StartTicks != st.StartTicks:
		// The pid was free to be reused, so our group had no process
		// left: nothing of ours to signal.
		return nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("signal: %w", err)
	}
	// The leader may be gone while others of its group live on: signal
	// the group either way.
	err = unix.Kill(-pid, sig)
	if errors.Is(err, unix.ESRCH) && ps.StartTicks == st.StartTicks {
		// The leader left its group (setsid); it is still ours.
		err = unix.Kill(pid, sig)
	}
	if err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal %v to process group %d: %w", sig, pid, err)
	}
	// A damaged handle must not make us kill some other group; the group
	// signal above has done what it could.
	if sig == unix.SIGKILL && st.Cgroup != "" && d.ownCgroup(st.Cgroup) {
		if err := killCgroup(st.Cgroup); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("signal %v to cgroup %s: %w", sig, st.Cgroup, err)
		}
	}
	return nil
}

// Recover re-attaches to a process after an agent restart: it checks that
// the pid still runs and is the same process (its start time matches the
// handle's), then watches it through a pidfd and resumes rotating its
// logs. It returns an error wrapping driver.ErrGone when the process has
// exited or the pid belongs to another process now.
func (d *Driver) Recover(ctx context.Context, h driver.Handle) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	pid, st, err := decodeHandle(h)
	if err != nil {
		return err
	}
	return d.attach(pid, st)
}

// attach is Recover after the handle has been read.
func (d *Driver) attach(pid int, st handleState) error {
	if c := d.tracked(pid, st); c != nil {
		if c.exited() {
			return fmt.Errorf("pid %d has exited: %w", pid, driver.ErrGone)
		}
		return nil
	}
	d.cgroups() // the note, once, as on Start
	// Open the pidfd first: if the start time still matches afterwards,
	// the pidfd refers to our process and not to a later holder of its pid.
	pidfd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("pid %d has exited: %w", pid, driver.ErrGone)
	}
	if err != nil {
		return fmt.Errorf("recover pid %d: %w", pid, err)
	}
	ps, err := readProcStat(pid)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		err = fmt.Errorf("pid %d has exited: %w", pid, driver.ErrGone)
	case err != nil:
		err = fmt.Errorf("recover pid %d: %w", pid, err)
	case ps.StartTicks != st.StartTicks:
		err = fmt.Errorf("pid %d now belongs to another process (started at tick %d, ours at %d): %w", pid, ps.StartTicks, st.StartTicks, driver.ErrGone)
	case ps.State == 'Z' || ps.State == 'X':
		err = fmt.Errorf("pid %d has exited: %w", pid, driver.ErrGone)
	}
	if err != nil {
		unix.Close(pidfd)
		return err
	}
	c, fresh := d.track(&container{pid: pid, st: st, done: make(chan struct{})})
	if !fresh {
		// A concurrent Recover won.
		unix.Close(pidfd)
		return nil
	}
	go d.watch(c, pidfd, unknownExit)
	go d.rotateLoop(c)
	d.log.Debug("recovered", "pid", pid, "cgroup", st.Cgroup)
	return nil
}

// Destroy removes the container's cgroup, killing anything still in it,
// and forgets the process once it has exited. It is idempotent. Without a
// cgroup there is nothing to release: the log files stay for Logs.
func (d *Driver) Destroy(ctx context.Context, h driver.Handle) error {
	pid, st, err := decodeHandle(h)
	if err != nil {
		return err
	}
	if st.Cgroup != "" {
		if !d.ownCgroup(st.Cgroup) {
			return fmt.Errorf("handle state: cgroup %q is not below %s", st.Cgroup, d.cgroupParentDir())
		}
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
		}
		if err := removeCgroup(ctx, st.Cgroup); err != nil {
			return err
		}
	}
	if c := d.tracked(pid, st); c != nil && c.exited() {
		d.forget(pid, st)
	}
	return nil
}

func (d *Driver) cgroupParentDir() string {
	return filepath.Join(d.cfg.CgroupRoot, d.cfg.CgroupParent)
}

// ownCgroup reports whether a handle's cgroup is one of this driver's
// container groups, which it may kill and remove.
func (d *Driver) ownCgroup(dir string) bool {
	return within(d.cgroupParentDir(), dir)
}

// KillAll sends SIGKILL to every container of this Driver that still
// runs, its process group and its cgroup: what trellis dev does on a
// second Ctrl-C, when waiting out the stop timeouts is not wanted.
func (d *Driver) KillAll(ctx context.Context) error {
	d.mu.Lock()
	var live []*container
	for _, c := range d.containers {
		select {
		case <-c.done:
		default:
			live = append(live, c)
		}
	}
	d.mu.Unlock()
	var errs []error
	for _, c := range live {
		if err := unix.Kill(-c.pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("kill process group %d: %w", c.pid, err))
		}
		if c.st.Cgroup != "" && d.ownCgroup(c.st.Cgroup) {
			if err := killCgroup(c.st.Cgroup); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
