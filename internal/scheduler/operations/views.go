package operations

import (
	"context"
	"slices"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
)

// EnvironmentInfo is what GetEnvironment returns.
type EnvironmentInfo struct {
	Environment *pbresource.Resource
	State       *pbscheduler.EnvironmentState
	// ActiveDeployment is the deployment in progress, nil when none.
	ActiveDeployment *pbresource.Resource
	// DesiredVersion is the EnvironmentVersion the scheduler keeps
	// running, nil when the environment was never deployed. After a
	// rollback its spec is not the environment's (the latest version's):
	// it is what runs.
	DesiredVersion *pbresource.Resource
}

// GetEnvironment returns an environment, its state, its active deployment
// and its desired version.
func (o *Operations) GetEnvironment(ctx context.Context, ns, name string) (*EnvironmentInfo, error) {
	res, env, err := o.readEnvironment(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	st, err := o.state(ctx, res, env)
	if err != nil {
		return nil, err
	}
	info := &EnvironmentInfo{Environment: res, State: st}
	reported, err := scheduler.EnvironmentStatusOf(res)
	if err != nil {
		return nil, err
	}
	if id := reported.GetActiveDeployment(); id != "" {
		r, err := o.API.Read(ctx, &pbresource.ReadRequest{Id: scheduler.DeploymentID(ns, id)})
		if err == nil {
			if info.ActiveDeployment, err = scheduler.ShowDeployment(r.GetResource()); err != nil {
				return nil, err
			}
		}
	}
	if v := reported.GetDesiredVersion(); v != "" {
		r, err := o.API.Read(ctx, &pbresource.ReadRequest{Id: scheduler.VersionID(ns, v)})
		if err == nil {
			info.DesiredVersion = r.GetResource()
		}
	}
	return info, nil
}

// ListEnvironments lists a namespace's environments, of one type when typ
// is set.
func (o *Operations) ListEnvironments(ctx context.Context, ns, typ string) ([]*pbresource.Resource, error) {
	list, err := o.API.List(ctx, &pbresource.ListRequest{Type: scheduler.EnvironmentType, Tenancy: &pbresource.Tenancy{Namespace: ns}})
	if err != nil {
		return nil, err
	}
	if typ == "" {
		return list.GetResources(), nil
	}
	if typ != scheduler.TypeDaemon {
		return nil, resource.NewFieldError("type", "must be %q (got %q)", scheduler.TypeDaemon, typ)
	}
	var out []*pbresource.Resource
	for _, res := range list.GetResources() {
		if e, err := resource.DecodeData[*pbscheduler.Environment](res); err == nil && e.GetType() == typ {
			out = append(out, res)
		}
	}
	return out, nil
}

// EnvironmentState is the environment's current-vs-desired view.
func (o *Operations) EnvironmentState(ctx context.Context, ns, name string) (*pbscheduler.EnvironmentState, error) {
	res, env, err := o.readEnvironment(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	return o.state(ctx, res, env)
}

// Diff is what deploying version (a uuid or number; "" for the latest)
// would change, instance by instance.
func (o *Operations) Diff(ctx context.Context, ns, name, version string) (*pbscheduler.EnvironmentDiff, error) {
	res, env, err := o.readEnvironment(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	uuid, ver, err := o.resolveVersion(ctx, res, env, version)
	if err != nil {
		return nil, err
	}
	group, err := scheduler.ParseGroup("instance_group", ver.GetInstanceGroup())
	if err != nil {
		return nil, err
	}
	instances, tasks, _, err := o.world(ctx, res)
	if err != nil {
		return nil, err
	}
	needs, holders, err := o.placement(ctx, ns, ver.GetTaskDefinition())
	if err != nil {
		return nil, err
	}
	d := scheduler.Diff(ver.GetTaskDefinition(), group, instances, tasks, needs, holders)
	d.Version, d.VersionNumber = uuid, ver.GetNumber()
	return d, nil
}

// Versions lists an environment's versions, newest first.
func (o *Operations) Versions(ctx context.Context, ns, name string) ([]*pbresource.Resource, error) {
	res, _, err := o.readEnvironment(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	owned, err := o.owned(ctx, res, scheduler.EnvironmentVersionType)
	if err != nil {
		return nil, err
	}
	number := func(r *pbresource.Resource) int64 {
		v, _ := resource.DecodeData[*pbscheduler.EnvironmentVersion](r)
		return v.GetNumber()
	}
	slices.SortFunc(owned, func(a, b *pbresource.Resource) int { return int(number(b) - number(a)) })
	return owned, nil
}

// state computes an environment's view from the store.
func (o *Operations) state(ctx context.Context, res *pbresource.Resource, env *pbscheduler.Environment) (*pbscheduler.EnvironmentState, error) {
	instances, tasks, numbers, err := o.world(ctx, res)
	if err != nil {
		return nil, err
	}
	g := env.GetInstanceGroup()
	reported, err := scheduler.EnvironmentStatusOf(res)
	if err != nil {
		return nil, err
	}
	if v := reported.GetDesiredVersion(); v != "" {
		if r, err := o.API.Read(ctx, &pbresource.ReadRequest{Id: scheduler.VersionID(res.GetId().GetTenancy().GetNamespace(), v)}); err == nil {
			if ver, err := resource.DecodeData[*pbscheduler.EnvironmentVersion](r.GetResource()); err == nil {
				g = ver.GetInstanceGroup()
			}
		}
	}
	group, err := scheduler.ParseGroup("instance_group", g)
	if err != nil {
		return nil, err
	}
	st := scheduler.State(group, instances, tasks, numbers)
	scheduler.MarkBlocked(st, reported.GetBlocked())
	return st, nil
}

// world reads the instances, the environment's tasks and the numbers of
// its versions.
func (o *Operations) world(ctx context.Context, res *pbresource.Resource) ([]scheduler.InstanceView, []scheduler.TaskView, map[string]int64, error) {
	owned, err := o.API.ListByOwner(ctx, &pbresource.ListByOwnerRequest{Owner: res.GetId()})
	if err != nil {
		return nil, nil, nil, err
	}
	var tasks []scheduler.TaskView
	numbers := map[string]int64{}
	for _, r := range owned.GetResources() {
		switch {
		case ids.SameType(r.GetId().GetType(), orchestrator.TaskType):
			if t, err := resource.DecodeData[*pborch.Task](r); err == nil {
				tasks = append(tasks, scheduler.TaskViewOf(res.GetId().GetName(), r, t))
			}
		case ids.SameType(r.GetId().GetType(), scheduler.EnvironmentVersionType):
			if v, err := resource.DecodeData[*pbscheduler.EnvironmentVersion](r); err == nil {
				numbers[r.GetId().GetName()] = v.GetNumber()
			}
		}
	}
	list, err := o.API.List(ctx, &pbresource.ListRequest{Type: orchestrator.InstanceType, Tenancy: &pbresource.Tenancy{}})
	if err != nil {
		return nil, nil, nil, err
	}
	var instances []scheduler.InstanceView
	for _, r := range list.GetResources() {
		if v, ok := scheduler.InstanceViewOf(r); ok {
			instances = append(instances, v)
		}
	}
	return instances, tasks, numbers, nil
}
