package operations

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
)

// CreateEnvironment stores a new, inactive environment and its first
// version, in one batch.
func (o *Operations) CreateEnvironment(ctx context.Context, ns string, spec Spec) (*EnvironmentResult, error) {
	if err := resource.ValidateName("name", spec.Name); err != nil {
		return nil, err
	}
	if len(spec.Name) > scheduler.MaxEnvironmentName {
		return nil, resource.NewFieldError("name", "%q is longer than %d characters: an environment's name is part of its tasks' names", spec.Name, scheduler.MaxEnvironmentName)
	}
	if spec.Type == "" {
		spec.Type = scheduler.TypeDaemon
	}
	ctx = resource.FromOperations(ctx)
	return rechecked(func() (*EnvironmentResult, error) { return o.createOnce(ctx, ns, spec) })
}

func (o *Operations) createOnce(ctx context.Context, ns string, spec Spec) (*EnvironmentResult, error) {
	id := scheduler.EnvironmentID(ns, spec.Name)
	if _, err := o.API.Read(ctx, &pbresource.ReadRequest{Id: id, Consistent: true}); err == nil {
		return nil, alreadyExists(ns, spec.Name)
	} else if status.Code(err) != codes.NotFound {
		return nil, err
	}
	unchanged, err := o.checkSpec(ctx, ns, spec.Name, spec)
	if err != nil {
		return nil, err
	}
	now := o.now()
	uuid, err := ids.NewUUID()
	if err != nil {
		return nil, err
	}
	env := &pbscheduler.Environment{
		Type: spec.Type, TaskDefinition: spec.TaskDefinition, InstanceGroup: spec.InstanceGroup, Deployment: spec.Deployment, Role: spec.Role,
		LatestVersion: uuid, VersionCount: 1,
		CreatedAt: timestamppb.New(now), UpdatedAt: timestamppb.New(now),
	}
	res, err := scheduler.NewResource(id, nil, env)
	if err != nil {
		return nil, err
	}
	res.Version = resource.CreateOnly
	// The first version names the environment as its owner without a uid:
	// the batch gives it the new one.
	ver, err := versionResource(ns, uuid, id, spec.Name, 1, env, now)
	if err != nil {
		return nil, err
	}
	wr, err := o.API.WriteBatch(ctx, &pbresource.WriteBatchRequest{
		Resources: []*pbresource.Resource{res, ver},
		Compares:  []*pbresource.Compare{unchanged},
	})
	if status.Code(err) == codes.Aborted {
		// The environment exists now, or another environment of the
		// namespace was written after the checks: then check again.
		if _, rerr := o.API.Read(ctx, &pbresource.ReadRequest{Id: id, Consistent: true}); rerr == nil {
			return nil, alreadyExists(ns, spec.Name)
		}
		return nil, errChecksStale
	}
	if err != nil {
		return nil, err
	}
	return &EnvironmentResult{Environment: wr.GetResources()[0], Version: uuid}, nil
}

// UpdateEnvironment changes an environment's spec: fields spec leaves
// empty keep their values, but the task definition is required. A change
// makes a new version, written with it; it deploys nothing.
func (o *Operations) UpdateEnvironment(ctx context.Context, ns, name string, spec Spec) (*EnvironmentResult, error) {
	if spec.Name != "" && spec.Name != name {
		return nil, resource.NewFieldError("name", "is %q but the path names %q", spec.Name, name)
	}
	if spec.TaskDefinition == "" {
		return nil, resource.NewFieldError("task_definition", "is required: an update names the task definition, even when it keeps it")
	}
	ctx = resource.FromOperations(ctx)
	return rechecked(func() (*EnvironmentResult, error) { return o.updateOnce(ctx, ns, name, spec) })
}

func (o *Operations) updateOnce(ctx context.Context, ns, name string, spec Spec) (*EnvironmentResult, error) {
	res, env, err := o.readEnvironment(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	if env.GetDeleting() {
		return nil, status.Errorf(codes.FailedPrecondition, "environment %s is being deleted", name)
	}
	next := proto.Clone(env).(*pbscheduler.Environment)
	next.TaskDefinition = spec.TaskDefinition
	if spec.Type != "" {
		next.Type = spec.Type
	}
	if spec.InstanceGroup != nil {
		next.InstanceGroup = spec.InstanceGroup
		if next.InstanceGroup.Cluster == "" {
			next.InstanceGroup.Cluster = env.GetInstanceGroup().GetCluster()
		}
	}
	if spec.Deployment != nil {
		next.Deployment = mergeConfig(env.GetDeployment(), spec.Deployment)
	}
	if spec.Role != "" {
		next.Role = spec.Role
	}
	if sameSpec(env, next) {
		return &EnvironmentResult{Environment: res, Version: env.GetLatestVersion(), Unchanged: true}, nil
	}
	merged := Spec{Name: name, Type: next.Type, TaskDefinition: next.TaskDefinition, InstanceGroup: next.InstanceGroup, Deployment: next.Deployment, Role: next.Role}
	unchanged, err := o.checkSpec(ctx, ns, name, merged)
	if err != nil {
		return nil, err
	}
	now := o.now()
	uuid, err := ids.NewUUID()
	if err != nil {
		return nil, err
	}
	next.LatestVersion = uuid
	next.VersionCount = env.GetVersionCount() + 1
	next.UpdatedAt = timestamppb.New(now)
	w, err := scheduler.WithData(res, next)
	if err != nil {
		return nil, err
	}
	ver, err := versionResource(ns, uuid, res.GetId(), name, next.VersionCount, next, now)
	if err != nil {
		return nil, err
	}
	out, err := o.API.WriteBatch(ctx, &pbresource.WriteBatchRequest{
		Resources: []*pbresource.Resource{w, ver},
		Compares:  []*pbresource.Compare{unchanged},
	})
	if status.Code(err) == codes.Aborted {
		// The environment changed (say so), or only another one of the
		// namespace did after the checks: check again.
		cur, rerr := o.API.Read(ctx, &pbresource.ReadRequest{Id: res.GetId(), Consistent: true})
		if rerr == nil && cur.GetResource().GetVersion() == res.GetVersion() {
			return nil, errChecksStale
		}
	}
	if err != nil {
		return nil, conflictf(err, "environment %s changed while it was being updated; retry", name)
	}
	return &EnvironmentResult{Environment: out.GetResources()[0], Version: uuid}, nil
}

// DeleteEnvironment marks an environment for deletion; the controller
// stops its tasks and removes it. Refused while a user deployment is in
// progress.
func (o *Operations) DeleteEnvironment(ctx context.Context, ns, name string) (*pbresource.Resource, error) {
	ctx = resource.FromOperations(ctx)
	res, env, err := o.readEnvironment(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	if env.GetDeleting() {
		return res, nil
	}
	deps, err := o.deployments(ctx, res)
	if err != nil {
		return nil, err
	}
	writes := []*pbresource.Resource{}
	now := timestamppb.New(o.now())
	for _, d := range deps {
		switch {
		case d.Data.GetType() == scheduler.DeploymentUser && d.Data.GetStatus() == scheduler.StatusInProgress:
			return nil, status.Errorf(codes.FailedPrecondition, "environment %s has deployment %s in progress: stop it first (trellis deployment stop %s %s)", name, d.Res.GetId().GetName(), name, d.Res.GetId().GetName())
		case d.Data.GetStatus() == scheduler.StatusPending:
			// Its request asks it to stop: it is canceled.
			w, err := scheduler.WithDeployment(d.Res, func(x *pbscheduler.Deployment) {
				x.Stop = &pbscheduler.DeploymentStop{At: now, By: scheduler.StopByEnvironmentDelete, Reason: "the environment is being deleted"}
			})
			if err != nil {
				return nil, err
			}
			writes = append(writes, w)
		}
	}
	next := proto.Clone(env).(*pbscheduler.Environment)
	next.Deleting, next.UpdatedAt = true, now
	w, err := scheduler.WithData(res, next)
	if err != nil {
		return nil, err
	}
	out, err := o.API.WriteBatch(ctx, &pbresource.WriteBatchRequest{Resources: append([]*pbresource.Resource{w}, writes...)})
	if err != nil {
		return nil, conflictf(err, "environment %s changed while it was being deleted; retry", name)
	}
	return out.GetResources()[0], nil
}

// sameSpec reports whether two environments have the same spec.
func sameSpec(a, b *pbscheduler.Environment) bool {
	return a.GetType() == b.GetType() && a.GetTaskDefinition() == b.GetTaskDefinition() && a.GetRole() == b.GetRole() &&
		proto.Equal(a.GetInstanceGroup(), b.GetInstanceGroup()) && proto.Equal(a.GetDeployment(), b.GetDeployment())
}

// mergeConfig is old with the fields set in upd replaced.
func mergeConfig(old, upd *pbscheduler.DeploymentConfig) *pbscheduler.DeploymentConfig {
	out := proto.Clone(old).(*pbscheduler.DeploymentConfig)
	if out == nil {
		out = &pbscheduler.DeploymentConfig{}
	}
	if upd.MinHealthyPercent != nil {
		out.MinHealthyPercent = proto.Int32(upd.GetMinHealthyPercent())
	}
	if upd.MinHealthyTime != "" {
		out.MinHealthyTime = upd.MinHealthyTime
	}
	if upd.HealthyDeadline != "" {
		out.HealthyDeadline = upd.HealthyDeadline
	}
	if upd.ProgressDeadline != "" {
		out.ProgressDeadline = upd.ProgressDeadline
	}
	out.AutoRollback = upd.AutoRollback
	return out
}

func alreadyExists(ns, name string) error {
	return status.Errorf(codes.AlreadyExists, "name: environment %s already exists in namespace %s: change it with `trellis env update`", name, ns)
}
