package docker

import (
	"context"
	"fmt"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"trellis.dev/trellis/internal/driver"
)

// Adopted is a container of this agent found on the engine by its labels.
type Adopted struct {
	// Handle finds the container again (Recover, Wait, Destroy...).
	Handle driver.Handle
	// TaskID, TaskUID and Container are the container's labels.
	TaskID    string
	TaskUID   string
	Container string
	// Name is the container's docker name, Image the image it runs.
	Name  string
	Image string
	// State is the engine's: created, running, paused, restarting,
	// removing, exited or dead.
	State string
	// Running: the container's process runs (paused counts as running).
	Running bool
	// Exit is how it ended, when State is exited or dead; Code -1
	// otherwise.
	Exit driver.Exit
}

// Recover checks that the handle's container is still there and running,
// after an agent restart. It returns an error wrapping driver.ErrGone when
// the container no longer exists or no longer runs; in the second case Wait
// on the same handle still reports how it ended, until Destroy removes it.
func (d *Driver) Recover(ctx context.Context, h driver.Handle) error {
	cli, err := d.client()
	if err != nil {
		return err
	}
	if h.Driver != "" && h.Driver != d.Name() {
		return fmt.Errorf("docker: recover: handle.Driver: %q is not a docker handle", h.Driver)
	}
	if h.ID == "" {
		return fmt.Errorf("docker: recover: handle.ID: empty")
	}
	info, err := cli.ContainerInspect(ctx, h.ID)
	if err != nil {
		if isGone(err) {
			return goneErr(h.ID, err)
		}
		return engineErr("inspect container "+shortID(h.ID), err)
	}
	if info.Config == nil || info.Config.Labels[LabelTask] == "" {
		return fmt.Errorf("docker: container %s is not a trellis container (no %s label)", shortID(h.ID), LabelTask)
	}
	if info.State == nil || !info.State.Running {
		code := -1
		if info.State != nil {
			code = info.State.ExitCode
		}
		return fmt.Errorf("docker: container %s: %w (it exited with code %d)", shortID(h.ID), driver.ErrGone, code)
	}
	d.log.Debug("recovered", "id", shortID(h.ID), "task", info.Config.Labels[LabelTask], "container", info.Config.Labels[LabelContainer])
	return nil
}

// Destroy removes the container, killing it first if it still runs. A
// container that is already gone (or being removed) is not an error.
func (d *Driver) Destroy(ctx context.Context, h driver.Handle) error {
	cli, err := d.client()
	if err != nil {
		return err
	}
	if h.ID == "" {
		return fmt.Errorf("docker: destroy: handle.ID: empty")
	}
	err = cli.ContainerRemove(ctx, h.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err == nil || isGone(err) {
		return nil
	}
	// A concurrent Destroy may be removing it right now (the engine then
	// refuses a second removal): that is as good as done.
	info, ierr := cli.ContainerInspect(ctx, h.ID)
	if isGone(ierr) || (ierr == nil && info.State != nil && info.State.Status == container.StateRemoving) {
		return nil
	}
	return engineErr("remove container "+shortID(h.ID), err)
}

// List returns every container labelled with this driver's cluster and
// agent identity, running or not, so that a restarted agent can re-adopt
// the ones it knows and Destroy the others. A container of another agent
// of the same name (another cluster, another dev run) is not listed.
func (d *Driver) List(ctx context.Context) ([]Adopted, error) {
	cli, err := d.client()
	if err != nil {
		return nil, err
	}
	found, err := cli.ContainerList(ctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", LabelAgentID+"="+d.owner.id), filters.Arg("label", LabelCluster+"="+d.owner.cluster)),
	})
	if err != nil {
		return nil, engineErr("list containers", err)
	}
	out := make([]Adopted, 0, len(found))
	for _, c := range found {
		if c.Labels[LabelTask] == "" || !d.owner.owns(c.Labels) {
			continue
		}
		// The list has no start time or exit details; inspect has.
		info, err := cli.ContainerInspect(ctx, c.ID)
		if isGone(err) {
			continue // removed since the list
		}
		if err != nil {
			return nil, engineErr("inspect container "+shortID(c.ID), err)
		}
		out = append(out, adoptedOf(info))
	}
	return out, nil
}

// adoptedOf reads an inspected container into an Adopted.
func adoptedOf(info container.InspectResponse) Adopted {
	a := Adopted{
		Handle: driver.Handle{Driver: "docker", ID: info.ID},
		Name:   trimSlash(info.Name),
		Exit:   driver.Exit{Code: -1},
	}
	if info.Config != nil {
		a.TaskID = info.Config.Labels[LabelTask]
		a.TaskUID = info.Config.Labels[LabelTaskUID]
		a.Container = info.Config.Labels[LabelContainer]
		a.Image = info.Config.Image
	}
	if st := info.State; st != nil {
		a.State = st.Status
		a.Running = st.Running
		if t, err := time.Parse(time.RFC3339Nano, st.StartedAt); err == nil && !t.IsZero() {
			a.Handle.StartedAt = t
		}
		if st.Status == container.StateExited || st.Status == container.StateDead {
			a.Exit = exitOf(st.ExitCode, st.OOMKilled)
		}
	}
	return a
}

// trimSlash drops the '/' the engine puts before container names.
func trimSlash(name string) string {
	if len(name) > 0 && name[0] == '/' {
		return name[1:]
	}
	return name
}

// Inventory implements driver.Inventory: this agent's containers, running
// or not.
func (d *Driver) Inventory(ctx context.Context) ([]driver.Owned, error) {
	found, err := d.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]driver.Owned, len(found))
	for i, f := range found {
		out[i] = driver.Owned{Handle: f.Handle, TaskUID: f.TaskUID, Container: f.Container}
	}
	return out, nil
}
