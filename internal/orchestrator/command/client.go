package command

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/scheduler"
)

// The orchestrator's reads and writes, through the HTTP API's generic
// resource face.

// The orchestrator's types as the HTTP API names them.
var (
	instanceWire = wire.Type{Group: orchestrator.Group, GroupVersion: orchestrator.GroupVersion, Kind: "Instance"}
	taskDefWire  = wire.Type{Group: orchestrator.Group, GroupVersion: orchestrator.GroupVersion, Kind: "TaskDefinition"}
	taskWire     = wire.Type{Group: orchestrator.Group, GroupVersion: orchestrator.GroupVersion, Kind: "Task"}

	// A task placed by the scheduler names its environment's version,
	// which task show gives by its number.
	environmentVersionWire = wire.Type{Group: scheduler.APIGroup, GroupVersion: scheduler.GroupVersion, Kind: "EnvironmentVersion"}
)

// readInstance reads one Instance.
func readInstance(ctx context.Context, c *client.Client, name string) (*wire.Resource, *pborch.Instance, error) {
	r, err := c.Read(ctx, client.Ref{Type: instanceWire, Name: name}, false)
	if err != nil {
		if client.IsCode(err, wire.CodeNotFound) {
			return nil, nil, fmt.Errorf("instance %q is not registered (trellis instance list shows the instances)", name)
		}
		return nil, nil, err
	}
	var in pborch.Instance
	if err := cli.DecodeData(r, &in); err != nil {
		return nil, nil, err
	}
	return r, &in, nil
}

// instanceView is the Instance r as readers see it
// (orchestrator.InstanceOf): its data in, with its agent's registration
// (status["agent"]) and the servers' verdict that it is down
// (status["orchestrator-instance"]) merged in.
func instanceView(r *wire.Resource, in *pborch.Instance) (*pborch.Instance, error) {
	res := &pbresource.Resource{Status: map[string]*pbresource.Status{}}
	for _, key := range []string{orchestrator.AgentStatusKey, orchestrator.DownStatusKey} {
		raw, ok := r.Status[key]
		if !ok {
			continue
		}
		var st pbresource.Status
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, &st); err != nil {
			return nil, fmt.Errorf("instance %s: the server returned a status[%q] this CLI cannot read: %w", r.ID.Name, key, err)
		}
		res.Status[key] = &st
	}
	return orchestrator.InstanceOf(res, in), nil
}

// updateInstance applies edit to an Instance with a compare-and-swap,
// re-reading and retrying when the agent or a server wrote in between.
func updateInstance(ctx context.Context, c *client.Client, name string, edit func(*pborch.Instance) error) (*wire.Resource, error) {
	for attempt := 0; ; attempt++ {
		r, in, err := readInstance(ctx, c, name)
		if err != nil {
			return nil, err
		}
		// A store from before status["agent"] kept the agent's session in
		// the data, which no write may set now: the agent registers it
		// again.
		in.Session = ""
		if err := edit(in); err != nil {
			return nil, err
		}
		data, err := cli.EncodeData(in)
		if err != nil {
			return nil, err
		}
		out, err := c.Write(ctx, client.Ref{Type: instanceWire, Name: name}, wire.WriteRequest{Data: data, Metadata: r.Metadata, Version: r.Version})
		if err == nil {
			return out, nil
		}
		if !client.IsCode(err, wire.CodeConflict) || attempt == 9 {
			return nil, err
		}
	}
}

func decodeTasks(list []*wire.Resource) ([]taskRow, error) {
	rows := make([]taskRow, 0, len(list))
	for _, r := range list {
		var t pborch.Task
		if err := cli.DecodeData(r, &t); err != nil {
			return nil, err
		}
		st, err := taskStatusOf(r)
		if err != nil {
			return nil, err
		}
		rows = append(rows, taskRow{r, &t, st})
	}
	return rows, nil
}

// taskStatusOf is a task's state as orchestrator.TaskStatusOf computes it,
// from the two keys the server returns: what the agent reports
// (status["agent"]) and the servers' verdict that it was lost
// (status["orchestrator-task"]); a task without either is PENDING.
func taskStatusOf(r *wire.Resource) (*pborch.TaskStatus, error) {
	res := &pbresource.Resource{Status: map[string]*pbresource.Status{}}
	for _, key := range []string{orchestrator.TaskStatusKey, orchestrator.LostStatusKey} {
		raw, ok := r.Status[key]
		if !ok {
			continue
		}
		var st pbresource.Status
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, &st); err != nil {
			return nil, fmt.Errorf("task %s: the server returned a status[%q] this CLI cannot read: %w", r.ID.Name, key, err)
		}
		res.Status[key] = &st
	}
	return orchestrator.TaskStatusOf(res), nil
}

// tasksOn lists the tasks placed on an instance, in every namespace.
func tasksOn(ctx context.Context, c *client.Client, instance string) ([]taskRow, error) {
	list, err := c.List(ctx, taskWire, client.ListOptions{Namespace: "*"})
	if err != nil {
		return nil, err
	}
	rows, err := decodeTasks(list)
	if err != nil {
		return nil, err
	}
	kept := rows[:0]
	for _, row := range rows {
		if row.task.GetInstance() == instance {
			kept = append(kept, row)
		}
	}
	return kept, nil
}

// readTask reads a task: what was placed, and what its agent reports.
func readTask(ctx context.Context, c *client.Client, namespace, name string) (*wire.Resource, *pborch.Task, *pborch.TaskStatus, error) {
	r, err := c.Read(ctx, client.Ref{Type: taskWire, Namespace: namespace, Name: name}, false)
	if err != nil {
		if client.IsCode(err, wire.CodeNotFound) {
			return nil, nil, nil, fmt.Errorf("task %q not found (trellis task list -A shows the tasks)", name)
		}
		return nil, nil, nil, err
	}
	var t pborch.Task
	if err := cli.DecodeData(r, &t); err != nil {
		return nil, nil, nil, err
	}
	st, err := taskStatusOf(r)
	if err != nil {
		return nil, nil, nil, err
	}
	return r, &t, st, nil
}

// environmentVersionName names a task's environment version by its
// number, as every other view does; the uuid the task records is kept when
// the version cannot be read (it was deleted with its environment).
func environmentVersionName(ctx context.Context, c *client.Client, namespace, uuid string) string {
	if uuid == "" {
		return "-"
	}
	r, err := c.Read(ctx, client.Ref{Type: environmentVersionWire, Namespace: namespace, Name: uuid}, false)
	if err != nil {
		return uuid
	}
	var v pbscheduler.EnvironmentVersion
	if err := cli.DecodeData(r, &v); err != nil || v.GetNumber() == 0 {
		return uuid
	}
	return fmt.Sprint(v.GetNumber())
}

// familyRevisions lists the stored revisions of a family, latest first.
func familyRevisions(ctx context.Context, c *client.Client, namespace, family string) ([]*wire.Resource, error) {
	list, err := c.List(ctx, taskDefWire, client.ListOptions{Namespace: namespace, Prefix: family + "-", Consistent: true})
	if err != nil {
		return nil, err
	}
	var out []*wire.Resource
	revs := map[*wire.Resource]int64{}
	for _, r := range list {
		if f, rev, ok := orchestrator.ParseTaskDefinitionName(r.ID.Name); ok && f == family {
			out = append(out, r)
			revs[r] = rev
		}
	}
	slices.SortFunc(out, func(a, b *wire.Resource) int { return int(revs[b] - revs[a]) })
	return out, nil
}

// registerTaskDef stores spec as its family's next revision. A spec equal
// to the latest revision is not stored again. Two registrations racing for
// the same revision cannot both win: a revision is immutable, so the loser
// is refused and tries the next one.
func registerTaskDef(ctx context.Context, c *client.Client, namespace string, spec *TaskDefinitionSpec) (*wire.Resource, bool, error) {
	for attempt := 0; attempt < 5; attempt++ {
		revs, err := familyRevisions(ctx, c, namespace, spec.Family)
		if err != nil {
			return nil, false, err
		}
		next := int64(1)
		if len(revs) > 0 {
			_, latest, _ := orchestrator.ParseTaskDefinitionName(revs[0].ID.Name)
			next = latest + 1
			if sameDefinition(spec, revs[0], latest) {
				return revs[0], false, nil
			}
		}
		td := proto.CloneOf(spec.Definition)
		td.Revision = next
		data, err := cli.EncodeData(td)
		if err != nil {
			return nil, false, err
		}
		ref := client.Ref{Type: taskDefWire, Namespace: namespace, Name: orchestrator.TaskDefinitionName(spec.Family, next)}
		r, err := c.Write(ctx, ref, wire.WriteRequest{Data: data})
		if err == nil {
			return r, true, nil
		}
		if client.IsCode(err, wire.CodeInvalidArgument) && strings.Contains(err.Error(), "immutable") {
			continue // another registration took this revision
		}
		return nil, false, fmt.Errorf("%s: %w", spec.Source, err)
	}
	return nil, false, fmt.Errorf("%s: other registrations of %s kept taking the next revision; try again", spec.Source, spec.Family)
}

// sameDefinition reports whether the spec, with the server's defaults
// applied, is what the stored revision holds.
func sameDefinition(spec *TaskDefinitionSpec, stored *wire.Resource, revision int64) bool {
	want := proto.CloneOf(spec.Definition)
	want.Revision = revision
	data, err := anypb.New(want)
	if err != nil {
		return false
	}
	res := &pbresource.Resource{Data: data}
	if err := orchestrator.MutateTaskDefinition(res); err != nil {
		return false
	}
	var got pborch.TaskDefinition
	if err := cli.DecodeData(stored, &got); err != nil {
		return false
	}
	if err := res.GetData().UnmarshalTo(want); err != nil {
		return false
	}
	return proto.Equal(want, &got)
}

// resolveTaskDef reads family:revision, or a family's latest revision.
func resolveTaskDef(ctx context.Context, c *client.Client, namespace, ref string) (*wire.Resource, *pborch.TaskDefinition, error) {
	family, rev, err := orchestrator.ParseTaskDefinitionRef(ref)
	if err != nil {
		return nil, nil, cli.Usage(err)
	}
	var r *wire.Resource
	if rev == 0 {
		revs, err := familyRevisions(ctx, c, namespace, family)
		if err != nil {
			return nil, nil, err
		}
		if len(revs) == 0 {
			return nil, nil, fmt.Errorf("task definition family %q has no revisions (trellis taskdef register -f FILE)", family)
		}
		r = revs[0]
	} else {
		r, err = c.Read(ctx, client.Ref{Type: taskDefWire, Namespace: namespace, Name: orchestrator.TaskDefinitionName(family, rev)}, false)
		if err != nil {
			if client.IsCode(err, wire.CodeNotFound) {
				return nil, nil, fmt.Errorf("task definition %s is not registered (trellis taskdef list %s)", ref, family)
			}
			return nil, nil, err
		}
	}
	var td pborch.TaskDefinition
	if err := cli.DecodeData(r, &td); err != nil {
		return nil, nil, err
	}
	return r, &td, nil
}
