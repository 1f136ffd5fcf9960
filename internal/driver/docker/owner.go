package docker

import (
	"context"
	"errors"
	"maps"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"trellis.dev/trellis/internal/driver"
)

// The labels that say whose a container is. The agent's name alone is not
// enough: every `trellis dev` names its agents dev-1..N, and two clusters
// may share an instance name, so an agent that swept by name would remove
// another cluster's containers on the same engine. A container is this
// agent's only when it carries both its cluster and its identity (an id
// kept in its data dir: unique per agent, stable across its restarts).
const (
	LabelCluster = "trellis.cluster"
	LabelAgentID = "trellis.agent_id"
)

// owner is the agent a driver's containers belong to.
type owner struct {
	// agent is the agent's name (trellis.agent), for people reading
	// `docker ps`; it decides nothing.
	agent string
	// cluster and id decide: see owns.
	cluster, id string
	// extra labels go on every container too (trellis dev's run).
	extra map[string]string
}

// ownerOf reads a Config: an empty AgentID is the agent's name, an empty
// Cluster "default", as an agent's own defaults are.
func ownerOf(cfg Config, agent string) owner {
	o := owner{agent: agent, cluster: cfg.Cluster, id: cfg.AgentID, extra: maps.Clone(cfg.Labels)}
	if o.cluster == "" {
		o.cluster = "default"
	}
	if o.id == "" {
		o.id = agent
	}
	return o
}

// labels are the owner's labels, put on every container it creates.
func (o owner) labels() map[string]string {
	l := make(map[string]string, 3+len(o.extra))
	maps.Copy(l, o.extra)
	l[LabelAgent] = o.agent
	l[LabelCluster] = o.cluster
	l[LabelAgentID] = o.id
	return l
}

// owns reports whether a container with labels l is this owner's: it
// carries both the cluster and the agent's identity. A container of an
// agent of the same name in another cluster, or of another registration
// of the name (another dev run), is not.
func (o owner) owns(l map[string]string) bool {
	return l[LabelCluster] == o.cluster && l[LabelAgentID] == o.id
}

// ownedBefore reports whether labels l are this agent's from before
// containers carried a cluster and identity: only the agent's name. Such
// a holder of a task the agent resumes is still its own; List and the
// orphan sweep never take them, since the name alone proves nothing.
func (o owner) ownedBefore(l map[string]string) bool {
	_, hasID := l[LabelAgentID]
	return !hasID && l[LabelAgent] == o.agent
}

// RemoveMarked removes, killing them first, the containers (holders too)
// that carry label key with a value for which dead reports true, whoever
// their agent: trellis dev's sweep of the containers of its earlier
// in-memory runs, which nothing else will ever remove. It returns how many
// it removed.
func (d *Driver) RemoveMarked(ctx context.Context, key string, dead func(value string) bool) (int, error) {
	cli, err := d.client()
	if err != nil {
		return 0, err
	}
	found, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", key))})
	if err != nil {
		return 0, engineErr("list containers", err)
	}
	removed := 0
	var errs []error
	for _, c := range found {
		v, ok := c.Labels[key]
		if !ok || !dead(v) {
			continue
		}
		if err := d.Destroy(ctx, driver.Handle{Driver: d.Name(), ID: c.ID}); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

// KillAll sends SIGKILL to every running container of this agent (its
// cluster and identity): trellis dev's second Ctrl-C. The agent's
// lifecycle sees them exit and removes them as usual.
func (d *Driver) KillAll(ctx context.Context) error {
	found, err := d.List(ctx)
	if err != nil {
		return err
	}
	cli, err := d.client()
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range found {
		if !c.Running || c.Container == "" {
			continue // a holder is removed once its task has stopped
		}
		if err := cli.ContainerKill(ctx, c.Handle.ID, "KILL"); err != nil && !isGone(err) {
			errs = append(errs, engineErr("kill container "+shortID(c.Handle.ID), err))
		}
	}
	return errors.Join(errs...)
}
