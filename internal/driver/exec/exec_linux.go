package exec

import (
	"context"
	"errors"
	"fmt"
	osexec "os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"trellis.dev/trellis/internal/driver"
)

// Exec runs cmd on the host with the container's environment and working
// directory, for command health checks. The exec driver has no isolation
// to enter: the command is not in the container's cgroup either, so that a
// check's memory never counts against (or OOM-kills) the container. It
// returns the exit code (128+signal when a signal killed it) and the first
// ExecOutputLimit bytes of stdout and stderr together. When ctx ends the
// command's whole process group is killed and ctx's error returned. The
// process need not be alive: the handle carries what Exec needs.
func (d *Driver) Exec(ctx context.Context, h driver.Handle, cmd []string) (int, []byte, error) {
	_, st, err := decodeHandle(h)
	if err != nil {
		return -1, nil, err
	}
	if len(cmd) == 0 || cmd[0] == "" {
		return -1, nil, errors.New("exec: empty command")
	}
	path, err := resolveCommand(cmd[0], envValue(st.Env, "PATH"), st.Dir)
	if err != nil {
		return -1, nil, fmt.Errorf("exec: %w", err)
	}
	out := &driver.OutputBuffer{Limit: ExecOutputLimit}
	c := osexec.CommandContext(ctx, path, cmd[1:]...)
	c.Args[0] = cmd[0]
	c.Env = st.Env
	c.Dir = st.Dir
	c.Stdout = out
	c.Stderr = out
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: st.Cred.sysCredential()}
	c.Cancel = func() error { return unix.Kill(-c.Process.Pid, unix.SIGKILL) }
	// A grandchild that keeps the output pipe open must not hold Exec past
	// its context.
	c.WaitDelay = time.Second
	err = startIn(st.Netns, c)
	if err == nil {
		err = c.Wait()
	}
	if ctx.Err() != nil {
		return -1, out.Bytes(), ctx.Err()
	}
	var ee *osexec.ExitError
	switch {
	case err == nil:
		return 0, out.Bytes(), nil
	case errors.As(err, &ee):
		return exitOf(nil, ee.ProcessState).Code, out.Bytes(), nil
	default:
		return -1, out.Bytes(), fmt.Errorf("exec %s: %w", cmd[0], err)
	}
}
