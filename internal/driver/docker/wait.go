package docker

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"golang.org/x/sys/unix"

	"trellis.dev/trellis/internal/driver"
)

// oomGrace is how long Wait watches for an OOM report that the engine
// delivers after the exit it belongs to, when the exit looks like one (see
// lateOOM).
const oomGrace = time.Second

// maxWaitRetries is how many times Wait waits again after the engine's
// wait call broke off while the container still ran (a dropped
// connection), before it reports the failure.
const maxWaitRetries = 3

// Wait blocks until the container is not running and reports how it
// ended. It returns an error only when ctx ends; any other failure is an
// Exit with Code -1 and Err set (wrapping driver.ErrGone when the container
// no longer exists).
func (d *Driver) Wait(ctx context.Context, h driver.Handle) (driver.Exit, error) {
	cli, err := d.client()
	if err != nil {
		return driver.Exit{Code: -1, Err: err}, nil
	}
	var waitErr error
	for range maxWaitRetries + 1 {
		// Both channels are fed by the client; ctx ending aborts the
		// request, which ends up on errC, so no case is left blocked.
		resC, errC := cli.ContainerWait(ctx, h.ID, container.WaitConditionNotRunning)
		select {
		case res := <-resC:
			return d.exitAfterWait(ctx, cli, h.ID, res), nil
		case err := <-errC:
			if ctx.Err() != nil {
				return driver.Exit{}, ctx.Err()
			}
			if isGone(err) {
				return driver.Exit{Code: -1, Err: goneErr(h.ID, err)}, nil
			}
			waitErr = err
		}
		// The wait broke off without an answer. Ask the container itself
		// before deciding whether it ended or the engine is in trouble.
		info, err := cli.ContainerInspect(ctx, h.ID)
		switch {
		case ctx.Err() != nil:
			return driver.Exit{}, ctx.Err()
		case isGone(err):
			return driver.Exit{Code: -1, Err: goneErr(h.ID, err)}, nil
		case err != nil || info.State == nil:
			return driver.Exit{Code: -1, Err: engineErr("wait for container "+shortID(h.ID), waitErr)}, nil
		case !info.State.Running:
			return exitOf(info.State.ExitCode, info.State.OOMKilled), nil
		}
		d.log.Warn("waiting again after the engine's wait broke off", "id", shortID(h.ID), "err", waitErr)
	}
	return driver.Exit{Code: -1, Err: engineErr("wait for container "+shortID(h.ID), waitErr)}, nil
}

// exitAfterWait completes the wait's exit code with what only the
// container's state knows (OOMKilled).
func (d *Driver) exitAfterWait(ctx context.Context, cli *client.Client, id string, res container.WaitResponse) driver.Exit {
	if res.Error != nil && res.Error.Message != "" {
		return driver.Exit{Code: -1, Err: fmt.Errorf("docker: wait for container %s: %s", shortID(id), res.Error.Message)}
	}
	info, err := cli.ContainerInspect(ctx, id)
	if err != nil || info.State == nil {
		// Removed already (or the engine is busy): the code is still good.
		return exitOf(int(res.StatusCode), false)
	}
	oom := info.State.OOMKilled
	limited := info.HostConfig != nil && info.HostConfig.Memory > 0
	if !oom && limited && res.StatusCode == 128+int64(syscall.SIGKILL) {
		started, _ := time.Parse(time.RFC3339Nano, info.State.StartedAt)
		oom = d.lateOOM(ctx, cli, id, started)
	}
	return exitOf(int(res.StatusCode), oom)
}

// lateOOM reports whether the engine reports an OOM kill of the container
// within oomGrace. The engine learns of an OOM kill and of the exit it
// causes by separate events, and under load the exit can come first: the
// state then says OOMKilled only a moment later. So a SIGKILLed container
// with a memory limit is worth that moment: the engine's event history
// since the start, then its live events until the grace ends.
func (d *Driver) lateOOM(ctx context.Context, cli *client.Client, id string, started time.Time) bool {
	ctx, cancel := context.WithTimeout(ctx, oomGrace+5*time.Second)
	defer cancel()
	opts := events.ListOptions{
		Until: unixTimestamp(time.Now().Add(oomGrace)),
		Filters: filters.NewArgs(
			filters.Arg("type", string(events.ContainerEventType)),
			filters.Arg("container", id),
			filters.Arg("event", string(events.ActionOOM)),
		),
	}
	if !started.IsZero() {
		opts.Since = unixTimestamp(started)
	}
	msgs, errs := cli.Events(ctx, opts)
	select {
	case <-msgs:
		d.log.Debug("the engine reported an OOM kill after the exit", "id", shortID(id))
		return true
	case <-errs: // the stream ended at Until, or failed
		return false
	}
}

// unixTimestamp is t in the engine's seconds.nanoseconds form.
func unixTimestamp(t time.Time) string {
	return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond())
}

// exitOf is the Exit for an engine exit code. The engine reports a
// container whose process a signal killed as 128+signal, the shell's
// convention; a program that chose such an exit status itself is
// indistinguishable, so Signal is an inference.
func exitOf(code int, oomKilled bool) driver.Exit {
	e := driver.Exit{Code: code, OOMKilled: oomKilled}
	if code > 128 && code < 160 {
		e.Signal = syscall.Signal(code - 128)
	}
	return e
}

// Signal sends sig to the container's main process. A container that has
// exited is not an error; one that no longer exists is driver.ErrGone.
func (d *Driver) Signal(ctx context.Context, h driver.Handle, sig syscall.Signal) error {
	cli, err := d.client()
	if err != nil {
		return err
	}
	if sig <= 0 {
		return fmt.Errorf("docker: signal %d is not a signal", int(sig))
	}
	name := signalName(sig)
	err = cli.ContainerKill(ctx, h.ID, name)
	if err == nil {
		return nil
	}
	if isGone(err) {
		return goneErr(h.ID, err)
	}
	// The engine refuses to signal a container that is not running, or
	// that stops while the signal is on its way.
	info, ierr := cli.ContainerInspect(ctx, h.ID)
	switch {
	case isGone(ierr):
		return goneErr(h.ID, err)
	case ierr == nil && info.State != nil && !info.State.Running:
		return nil
	}
	return engineErr(fmt.Sprintf("send %s to container %s", name, shortID(h.ID)), err)
}

// signalName is the name the engine is given ("SIGTERM"), or the number
// for a signal without one.
func signalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return strconv.Itoa(int(sig))
}
