package docker

import (
	"context"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"trellis.dev/trellis/internal/driver"
)

// cleanupTimeout bounds the removal of a container that Start created but
// could not start, which runs even when Start's ctx has ended.
const cleanupTimeout = 30 * time.Second

// Start creates and starts spec's container. The image must be on the host.
func (d *Driver) Start(ctx context.Context, spec driver.Spec) (driver.Handle, error) {
	cli, err := d.client()
	if err != nil {
		return driver.Handle{}, err
	}
	cfg, host, err := createConfig(spec, d.owner, d.network)
	if err != nil {
		return driver.Handle{}, fmt.Errorf("docker: %w", err)
	}
	name := containerName(spec.TaskID, spec.TaskUID, spec.Container)

	if _, err := cli.ImageInspect(ctx, spec.Image); err != nil {
		if cerrdefs.IsNotFound(err) {
			return driver.Handle{}, fmt.Errorf("docker: image %q: %w (the driver never pulls)", spec.Image, driver.ErrImageMissing)
		}
		return driver.Handle{}, engineErr("inspect image "+spec.Image, err)
	}

	created, err := cli.ContainerCreate(ctx, cfg, host, nil, nil, name)
	if cerrdefs.IsConflict(err) {
		// The name is taken: by an earlier start of this same container
		// of this same incarnation (a restart), if it is ours.
		if err := d.removeStale(ctx, cli, name, spec); err != nil {
			return driver.Handle{}, err
		}
		created, err = cli.ContainerCreate(ctx, cfg, host, nil, nil, name)
	}
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			// The image went away between the inspect and the create.
			return driver.Handle{}, fmt.Errorf("docker: image %q: %w (the driver never pulls): %w", spec.Image, driver.ErrImageMissing, err)
		}
		return driver.Handle{}, engineErr("create container "+name, err)
	}
	for _, w := range created.Warnings {
		d.log.Warn("engine warning on create", "container", name, "warning", w)
	}

	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		d.discard(ctx, cli, created.ID, name)
		return driver.Handle{}, engineErr("start container "+name, err)
	}
	h := driver.Handle{Driver: d.Name(), ID: created.ID, StartedAt: time.Now()}
	if info, err := cli.ContainerInspect(ctx, created.ID); err == nil && info.State != nil {
		if t, err := time.Parse(time.RFC3339Nano, info.State.StartedAt); err == nil {
			h.StartedAt = t
		}
	}
	d.log.Debug("started", "container", name, "id", shortID(created.ID), "image", spec.Image)
	return h, nil
}

// removeStale removes the container called name if it is an exited
// container of spec's own (task uid, container); anything else keeps the
// name and fails the start.
func (d *Driver) removeStale(ctx context.Context, cli *client.Client, name string, spec driver.Spec) error {
	info, err := cli.ContainerInspect(ctx, name)
	if err != nil {
		return engineErr("inspect container "+name, err)
	}
	var l map[string]string
	if info.Config != nil {
		l = info.Config.Labels
	}
	if l[LabelTaskUID] != spec.TaskUID || l[LabelContainer] != spec.Container || l[LabelTask] != spec.TaskID {
		return fmt.Errorf("docker: container name %s is taken by container %s, which is not this task's", name, shortID(info.ID))
	}
	if info.State != nil && info.State.Running {
		return fmt.Errorf("docker: container %s (%s) of this task already runs; recover it rather than start another", name, shortID(info.ID))
	}
	d.log.Debug("removing the exited container of an earlier start", "container", name, "id", shortID(info.ID))
	if err := cli.ContainerRemove(ctx, info.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return engineErr("remove exited container "+name, err)
	}
	return nil
}

// discard removes a container that was created but not started, even if
// ctx has ended, so that a failed start leaves nothing behind.
func (d *Driver) discard(ctx context.Context, cli *client.Client, id, name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		d.log.Warn("cannot remove a container that failed to start", "container", name, "id", shortID(id), "err", err)
	}
}

// engineErr wraps an engine error with what was being done, and marks an
// unreachable engine as driver.ErrUnavailable.
func engineErr(op string, err error) error {
	if client.IsErrConnectionFailed(err) {
		return fmt.Errorf("docker: %s: %w: %w", op, driver.ErrUnavailable, err)
	}
	return fmt.Errorf("docker: %s: %w", op, err)
}

// goneErr says that the container of a handle no longer exists.
func goneErr(id string, err error) error {
	return fmt.Errorf("docker: container %s: %w: %w", shortID(id), driver.ErrGone, err)
}

// shortID is the 12-character form docker prints.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// isGone reports whether err says the container does not exist.
func isGone(err error) bool { return cerrdefs.IsNotFound(err) }
