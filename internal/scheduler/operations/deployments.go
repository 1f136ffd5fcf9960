package operations

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
)

// StartDeployment asks for version (a uuid or number; "" for the latest)
// to be deployed: a pending user deployment, which cancels any other
// pending one and starts once none is in progress. A version that is not
// the latest is stale and refused with a conflict: roll back to deploy an
// older one.
func (o *Operations) StartDeployment(ctx context.Context, ns, name, version string) (*pbresource.Resource, error) {
	ctx = resource.FromOperations(ctx)
	res, env, err := o.readEnvironment(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	uuid, ver, err := o.resolveVersion(ctx, res, env, version)
	if err != nil {
		return nil, err
	}
	if uuid != env.GetLatestVersion() {
		return nil, status.Errorf(codes.Aborted, "version: %s (number %d) is stale: environment %s has changed since, its latest version is number %d (%s); deploy that, or roll back to this one with `trellis rollback %s --version %d`",
			uuid, ver.GetNumber(), name, env.GetVersionCount(), env.GetLatestVersion(), name, ver.GetNumber())
	}
	return o.newUserDeployment(ctx, res, env, uuid, ver, "")
}

// RollbackDeployment deploys version, or when it is "" the version
// deployed before the one in place.
func (o *Operations) RollbackDeployment(ctx context.Context, ns, name, version string) (*pbresource.Resource, error) {
	ctx = resource.FromOperations(ctx)
	res, env, err := o.readEnvironment(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	if version == "" {
		prev, err := o.previousVersion(ctx, res, env)
		if err != nil {
			return nil, err
		}
		version = prev
	}
	uuid, ver, err := o.resolveVersion(ctx, res, env, version)
	if err != nil {
		return nil, err
	}
	return o.newUserDeployment(ctx, res, env, uuid, ver, scheduler.RollbackByUser)
}

// maxStatusRetries bounds how often a deployment is made again because
// the environment's status, and nothing a user decides, changed under it.
const maxStatusRetries = 5

func (o *Operations) newUserDeployment(ctx context.Context, res *pbresource.Resource, env *pbscheduler.Environment, uuid string, ver *pbscheduler.EnvironmentVersion, rollbackOf string) (*pbresource.Resource, error) {
	name, ns := res.GetId().GetName(), res.GetId().GetTenancy().GetNamespace()
	if env.GetDeleting() {
		return nil, status.Errorf(codes.FailedPrecondition, "environment %s is being deleted", name)
	}
	if _, _, err := o.taskDefinition(ctx, ns, "version", ver.GetTaskDefinition()); err != nil {
		return nil, err
	}
	for try := 1; ; try++ {
		out, err := o.writeUserDeployment(ctx, res, uuid, ver, rollbackOf)
		if status.Code(err) != codes.Aborted || try == maxStatusRetries {
			return out, conflictf(err, "environment %s changed while the deployment was being made; retry", name)
		}
		// The controller reporting the environment's status (or starting
		// or ending a deployment) is no reason to refuse: the same
		// decision is made again on what is stored, as long as the user's
		// spec (the generation) is the one read.
		cur, rerr := o.API.Read(ctx, &pbresource.ReadRequest{Id: res.GetId(), Consistent: true})
		if rerr != nil || cur.GetResource().GetGeneration() != res.GetGeneration() || cur.GetResource().GetId().GetUid() != res.GetId().GetUid() {
			return nil, conflictf(err, "environment %s changed while the deployment was being made; retry", name)
		}
		res = cur.GetResource()
	}
}

// writeUserDeployment writes a pending user deployment of version uuid,
// cancelling the pending ones, with the environment compared at the
// version of res.
func (o *Operations) writeUserDeployment(ctx context.Context, res *pbresource.Resource, uuid string, ver *pbscheduler.EnvironmentVersion, rollbackOf string) (*pbresource.Resource, error) {
	name, ns := res.GetId().GetName(), res.GetId().GetTenancy().GetNamespace()
	deps, err := o.deployments(ctx, res)
	if err != nil {
		return nil, err
	}
	now := o.now()
	id, err := scheduler.NewDeploymentID(now)
	if err != nil {
		return nil, err
	}
	var writes []*pbresource.Resource
	for _, d := range deps {
		if d.Data.GetType() == scheduler.DeploymentUser && d.Data.GetStatus() == scheduler.StatusPending {
			// Its request asks it to stop (it is canceled), a CAS on the
			// deployment read: had the scheduler started it since, this
			// batch fails and is decided again.
			w, err := scheduler.WithDeployment(d.Res, func(x *pbscheduler.Deployment) {
				x.Stop = &pbscheduler.DeploymentStop{At: timestamppb.New(now), By: scheduler.StopByDeployment(id), Reason: "replaced by deployment " + id}
			})
			if err != nil {
				return nil, err
			}
			writes = append(writes, w)
		}
	}
	// Pending until the scheduler starts it (scheduler.MergeDeployment):
	// the request is all there is to write.
	d := &pbscheduler.Deployment{
		Environment: name, Version: uuid, VersionNumber: ver.GetNumber(), TaskDefinition: ver.GetTaskDefinition(),
		Type: scheduler.DeploymentUser, CreatedAt: timestamppb.New(now), RollbackOf: rollbackOf,
	}
	dr, err := scheduler.NewResource(scheduler.DeploymentID(ns, id), res.GetId(), d)
	if err != nil {
		return nil, err
	}
	dr.Version = resource.CreateOnly
	// The environment must still be at the version read: a concurrent
	// update or delete fails this batch.
	out, err := o.API.WriteBatch(ctx, &pbresource.WriteBatchRequest{
		Resources: append([]*pbresource.Resource{dr}, writes...),
		Compares:  []*pbresource.Compare{{Op: pbresource.Compare_OP_VERSION, Id: res.GetId(), Version: res.GetVersion()}},
	})
	if err != nil {
		return nil, err
	}
	return scheduler.ShowDeployment(out.GetResources()[0])
}

// StopDeployment halts a pending or in-progress deployment: tasks it
// started stay. The deployment's request alone is written, with the stop
// (who, when, why), a CAS on the deployment read: only one that has not
// ended is stopped, and the scheduler's progress reports, which write its
// status, are no reason to refuse: the same decision is made again on
// what is stored. The scheduler makes the environment inactive when its
// active deployment has stopped (scheduler.ReportStatus), as its next run
// reads it.
func (o *Operations) StopDeployment(ctx context.Context, ns, name, id string) (*pbresource.Resource, error) {
	ctx = resource.FromOperations(ctx)
	if _, _, err := o.readEnvironment(ctx, ns, name); err != nil {
		return nil, err
	}
	for try := 1; ; try++ {
		dr, d, err := o.readDeployment(ctx, ns, name, id)
		if err != nil {
			return nil, err
		}
		if scheduler.DeploymentDone(d.GetStatus()) {
			return nil, status.Errorf(codes.FailedPrecondition, "deployment %s is %s already: only a pending or in-progress deployment can be stopped", id, d.GetStatus())
		}
		dw, err := scheduler.WithDeployment(dr, func(x *pbscheduler.Deployment) {
			x.Stop = &pbscheduler.DeploymentStop{At: timestamppb.New(o.now()), By: scheduler.StopByUser, Reason: "stopped by a user"}
		})
		if err != nil {
			return nil, err
		}
		out, err := o.API.Write(ctx, &pbresource.WriteRequest{Resource: dw})
		if status.Code(err) == codes.Aborted && try < maxStatusRetries {
			continue
		}
		if err != nil {
			return nil, conflictf(err, "deployment %s changed while it was being stopped; retry", id)
		}
		return scheduler.ShowDeployment(out.GetResource())
	}
}

// GetDeployment returns one deployment of an environment.
func (o *Operations) GetDeployment(ctx context.Context, ns, name, id string) (*pbresource.Resource, error) {
	res, _, err := o.readDeployment(ctx, ns, name, id)
	if err != nil {
		return nil, err
	}
	return scheduler.ShowDeployment(res)
}

// ListDeployments lists an environment's deployments, latest first.
func (o *Operations) ListDeployments(ctx context.Context, ns, name string) ([]*pbresource.Resource, error) {
	res, _, err := o.readEnvironment(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	out, err := o.owned(ctx, res, scheduler.DeploymentType)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b *pbresource.Resource) int { return strings.Compare(b.GetId().GetName(), a.GetId().GetName()) })
	for i, res := range out {
		if out[i], err = scheduler.ShowDeployment(res); err != nil {
			return nil, err
		}
	}
	return out, nil
}
