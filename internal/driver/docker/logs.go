package docker

import (
	"context"
	"fmt"
	"io"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"trellis.dev/trellis/internal/driver"
)

// Logs reads one stream of the container's log from the engine, from the
// oldest line it keeps. With follow the reader goes on until ctx ends or
// the container stops, and then reports io.EOF. spec is not needed: the
// engine keeps docker logs, not LogDir.
func (d *Driver) Logs(ctx context.Context, h driver.Handle, _ driver.Spec, stream driver.Stream, follow bool) (io.ReadCloser, error) {
	cli, err := d.client()
	if err != nil {
		return nil, err
	}
	if stream != driver.Stdout && stream != driver.Stderr {
		return nil, fmt.Errorf("docker: logs: stream %q is neither %q nor %q", stream, driver.Stdout, driver.Stderr)
	}
	body, err := cli.ContainerLogs(ctx, h.ID, container.LogsOptions{
		ShowStdout: stream == driver.Stdout,
		ShowStderr: stream == driver.Stderr,
		Follow:     follow,
	})
	if err != nil {
		if isGone(err) {
			return nil, goneErr(h.ID, err)
		}
		return nil, engineErr(fmt.Sprintf("read the %s log of container %s", stream, shortID(h.ID)), err)
	}
	// The engine multiplexes both streams into frames even when one is
	// asked for; a goroutine strips the framing into a pipe.
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, pw, body)
		body.Close()
		if ctx.Err() != nil {
			// The caller ended the follow: a normal end of the stream.
			err = nil
		}
		pw.CloseWithError(err)
	}()
	return &logReader{PipeReader: pr, body: body}, nil
}

// logReader is the demultiplexed stream; closing it also closes the
// engine's response, which ends the copying goroutine.
type logReader struct {
	*io.PipeReader
	body io.Closer
}

func (r *logReader) Close() error {
	r.body.Close()
	return r.PipeReader.Close()
}
