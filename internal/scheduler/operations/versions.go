package operations

import (
	"context"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
)

// resolveVersion finds version (a uuid, a number, or "" for the latest)
// among the environment's versions.
func (o *Operations) resolveVersion(ctx context.Context, res *pbresource.Resource, env *pbscheduler.Environment, version string) (string, *pbscheduler.EnvironmentVersion, error) {
	name, ns := res.GetId().GetName(), res.GetId().GetTenancy().GetNamespace()
	if version == "" {
		version = env.GetLatestVersion()
	}
	if n, err := strconv.ParseInt(version, 10, 64); err == nil {
		vers, err := o.owned(ctx, res, scheduler.EnvironmentVersionType)
		if err != nil {
			return "", nil, err
		}
		for _, r := range vers {
			if v, err := resource.DecodeData[*pbscheduler.EnvironmentVersion](r); err == nil && v.GetNumber() == n {
				return r.GetId().GetName(), v, nil
			}
		}
		return "", nil, resource.NewFieldError("version", "environment %s has no version number %d (it has 1 to %d)", name, n, env.GetVersionCount())
	}
	if !resource.IsDNSLabel(version) {
		return "", nil, resource.NewFieldError("version", "%q is neither a version uuid nor a version number", version)
	}
	resp, err := o.API.Read(ctx, &pbresource.ReadRequest{Id: scheduler.VersionID(ns, version), Consistent: true})
	if status.Code(err) == codes.NotFound {
		return "", nil, resource.NewFieldError("version", "%s is not a version of environment %s", version, name)
	}
	if err != nil {
		return "", nil, err
	}
	v, err := resource.DecodeData[*pbscheduler.EnvironmentVersion](resp.GetResource())
	if err != nil {
		return "", nil, err
	}
	// The owner's uid ties the version to one incarnation of the
	// environment (its environment_uid is empty on a first version, which
	// is written with the environment, before its uid is known).
	if v.GetEnvironment() != name || resp.GetResource().GetOwner().GetUid() != res.GetId().GetUid() {
		return "", nil, resource.NewFieldError("version", "%s is a version of environment %s, not of %s", version, v.GetEnvironment(), name)
	}
	return version, v, nil
}

// previousVersion is what a rollback without a version returns to: the
// last version that completed a deployment, if it is not the one in
// place; else the newest other version a deployment completed; else the
// version numbered one below the one in place.
func (o *Operations) previousVersion(ctx context.Context, res *pbresource.Resource, env *pbscheduler.Environment) (string, error) {
	reported, err := scheduler.EnvironmentStatusOf(res)
	if err != nil {
		return "", err
	}
	cur := reported.GetDesiredVersion()
	if cur == "" {
		return "", status.Errorf(codes.FailedPrecondition, "environment %s has never been deployed: there is no earlier version to roll back to", res.GetId().GetName())
	}
	if v := reported.GetLastCompletedVersion(); v != "" && v != cur {
		return v, nil
	}
	deps, err := o.deployments(ctx, res)
	if err != nil {
		return "", err
	}
	for i := len(deps) - 1; i >= 0; i-- {
		d := deps[i].Data
		if d.GetType() == scheduler.DeploymentUser && d.GetStatus() == scheduler.StatusCompleted && d.GetVersion() != cur {
			return d.GetVersion(), nil
		}
	}
	_, ver, err := o.resolveVersion(ctx, res, env, cur)
	if err != nil {
		return "", err
	}
	if ver.GetNumber() <= 1 {
		return "", status.Errorf(codes.FailedPrecondition, "environment %s runs its first version: there is no earlier version to roll back to", res.GetId().GetName())
	}
	return strconv.FormatInt(ver.GetNumber()-1, 10), nil
}

func versionResource(ns, uuid string, owner *pbresource.ID, env string, number int64, e *pbscheduler.Environment, now time.Time) (*pbresource.Resource, error) {
	v := &pbscheduler.EnvironmentVersion{
		Environment: env, EnvironmentUid: owner.GetUid(), Number: number, TaskDefinition: e.GetTaskDefinition(),
		InstanceGroup: e.GetInstanceGroup(), Deployment: e.GetDeployment(), Role: e.GetRole(), CreatedAt: timestamppb.New(now),
	}
	res, err := scheduler.NewResource(scheduler.VersionID(ns, uuid), owner, v)
	if err != nil {
		return nil, err
	}
	res.Version = resource.CreateOnly
	return res, nil
}
