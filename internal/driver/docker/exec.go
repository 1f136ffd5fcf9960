package docker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"trellis.dev/trellis/internal/driver"
)

// maxExecOutput is how much of an exec's combined output is kept.
const maxExecOutput = driver.ExecOutputLimit

// Exec runs cmd inside the running container and returns its exit code and
// the first maxExecOutput bytes of its stdout and stderr, interleaved as
// written. When ctx ends it returns ctx's error at once; the engine cannot
// kill an exec'd process, so it runs on until it ends or the container
// stops.
func (d *Driver) Exec(ctx context.Context, h driver.Handle, cmd []string) (int, []byte, error) {
	cli, err := d.client()
	if err != nil {
		return -1, nil, err
	}
	if len(cmd) == 0 || cmd[0] == "" {
		return -1, nil, errors.New("docker: exec: cmd: empty program")
	}
	created, err := cli.ContainerExecCreate(ctx, h.ID, container.ExecOptions{
		Cmd:          cmd,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		if isGone(err) {
			return -1, nil, goneErr(h.ID, err)
		}
		return -1, nil, engineErr(fmt.Sprintf("exec %q in container %s", cmd[0], shortID(h.ID)), err)
	}
	att, err := cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return -1, nil, engineErr(fmt.Sprintf("start exec %q in container %s", cmd[0], shortID(h.ID)), err)
	}
	defer att.Close()
	// The hijacked connection does not watch ctx once established:
	// closing it is what unblocks the read below.
	stop := context.AfterFunc(ctx, att.Close)
	defer stop()

	out := &driver.OutputBuffer{Limit: maxExecOutput}
	_, copyErr := stdcopy.StdCopy(out, out, att.Reader)
	if ctx.Err() != nil {
		return -1, out.Bytes(), ctx.Err()
	}
	if copyErr != nil {
		return -1, out.Bytes(), engineErr(fmt.Sprintf("read the output of exec %q in container %s", cmd[0], shortID(h.ID)), copyErr)
	}
	code, err := execExitCode(ctx, cli, created.ID)
	if err != nil {
		return -1, out.Bytes(), engineErr(fmt.Sprintf("exit code of exec %q in container %s", cmd[0], shortID(h.ID)), err)
	}
	return code, out.Bytes(), nil
}

// execExitCode reads an exec's exit code once the engine has recorded it,
// which can trail the end of its output by a moment.
func execExitCode(ctx context.Context, cli *client.Client, execID string) (int, error) {
	delay := 5 * time.Millisecond
	for {
		info, err := cli.ContainerExecInspect(ctx, execID)
		if err != nil {
			return -1, err
		}
		if !info.Running {
			return info.ExitCode, nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return -1, ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}
