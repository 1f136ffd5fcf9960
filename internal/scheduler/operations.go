package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// Operations are the seed's API: what people call to create, change,
// deploy, stop, roll back and look at environments. Each is a few reads
// and one CAS write (or batch); the controller does the rest.
type Operations struct {
	API resource.API
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	// afterCheck, when set (by tests), runs between an operation's checks
	// and its write.
	afterCheck func()
}

func (o *Operations) now() time.Time {
	if o.Now == nil {
		return time.Now()
	}
	return o.Now()
}

// Spec is what people write of an environment.
type Spec struct {
	Name           string
	Type           string
	TaskDefinition string
	InstanceGroup  *pbscheduler.InstanceGroup
	Deployment     *pbscheduler.DeploymentConfig
	Role           string
}

// EnvironmentResult is what create and update return.
type EnvironmentResult struct {
	Environment *pbresource.Resource
	Version     string
	Unchanged   bool
}

// CreateEnvironment stores a new, inactive environment and its first
// version.
func (o *Operations) CreateEnvironment(ctx context.Context, ns string, spec Spec) (*EnvironmentResult, error) {
	if err := resource.ValidateName("name", spec.Name); err != nil {
		return nil, err
	}
	if len(spec.Name) > MaxEnvironmentName {
		return nil, resource.NewFieldError("name", "%q is longer than %d characters: an environment's name is part of its tasks' names", spec.Name, MaxEnvironmentName)
	}
	if spec.Type == "" {
		spec.Type = TypeDaemon
	}
	return guarded(func() (*EnvironmentResult, error) { return o.createOnce(ctx, ns, spec) })
}

func (o *Operations) createOnce(ctx context.Context, ns string, spec Spec) (*EnvironmentResult, error) {
	guard, err := o.guardWrite(ctx, ns)
	if err != nil {
		return nil, err
	}
	if _, err := o.API.Read(ctx, &pbresource.ReadRequest{Id: EnvironmentID(ns, spec.Name), Consistent: true}); err == nil {
		return nil, alreadyExists(ns, spec.Name)
	} else if status.Code(err) != codes.NotFound {
		return nil, err
	}
	if err := o.checkSpec(ctx, ns, spec.Name, spec); err != nil {
		return nil, err
	}
	if o.afterCheck != nil {
		o.afterCheck()
	}
	now := o.now()
	uuid, err := ids.NewUUID()
	if err != nil {
		return nil, err
	}
	env := &pbscheduler.Environment{
		Type: spec.Type, TaskDefinition: spec.TaskDefinition, InstanceGroup: spec.InstanceGroup, Deployment: spec.Deployment, Role: spec.Role,
		Status: EnvInactive, Health: HealthHealthy, LatestVersion: uuid, VersionCount: 1,
		CreatedAt: timestamppb.New(now), UpdatedAt: timestamppb.New(now),
	}
	res, err := newResource(EnvironmentID(ns, spec.Name), nil, env)
	if err != nil {
		return nil, err
	}
	res.Version = resource.CreateOnly
	wr, err := o.API.WriteBatch(ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{res, guard}})
	if status.Code(err) == codes.Aborted {
		// The environment exists now, or another create or update of the
		// namespace wrote first: then start over, and check again.
		if _, rerr := o.API.Read(ctx, &pbresource.ReadRequest{Id: EnvironmentID(ns, spec.Name), Consistent: true}); rerr == nil {
			return nil, alreadyExists(ns, spec.Name)
		}
		return nil, errGuardMoved
	}
	if err != nil {
		return nil, err
	}
	stored := wr.GetResources()[0]
	ver, err := versionResource(ns, uuid, stored.GetId(), spec.Name, 1, env, now)
	if err != nil {
		return nil, err
	}
	if _, err := o.API.Write(ctx, &pbresource.WriteRequest{Resource: ver}); err != nil {
		return nil, fmt.Errorf("environment %s was created, but writing its first version failed (update it to make one): %w", spec.Name, err)
	}
	return &EnvironmentResult{Environment: stored, Version: uuid}, nil
}

// UpdateEnvironment changes an environment's spec: fields spec leaves
// empty keep their values, but the task definition is required. A change
// makes a new version; it deploys nothing.
func (o *Operations) UpdateEnvironment(ctx context.Context, ns, name string, spec Spec) (*EnvironmentResult, error) {
	if spec.Name != "" && spec.Name != name {
		return nil, resource.NewFieldError("name", "is %q but the path names %q", spec.Name, name)
	}
	if spec.TaskDefinition == "" {
		return nil, resource.NewFieldError("task_definition", "is required: an update names the task definition, even when it keeps it")
	}
	return guarded(func() (*EnvironmentResult, error) { return o.updateOnce(ctx, ns, name, spec) })
}

func (o *Operations) updateOnce(ctx context.Context, ns, name string, spec Spec) (*EnvironmentResult, error) {
	guard, err := o.guardWrite(ctx, ns)
	if err != nil {
		return nil, err
	}
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
	if err := o.checkSpec(ctx, ns, name, merged); err != nil {
		return nil, err
	}
	if o.afterCheck != nil {
		o.afterCheck()
	}
	now := o.now()
	uuid, err := ids.NewUUID()
	if err != nil {
		return nil, err
	}
	next.LatestVersion = uuid
	next.VersionCount = env.GetVersionCount() + 1
	next.UpdatedAt = timestamppb.New(now)
	w, err := withData(res, next)
	if err != nil {
		return nil, err
	}
	ver, err := versionResource(ns, uuid, res.GetId(), name, next.VersionCount, next, now)
	if err != nil {
		return nil, err
	}
	out, err := o.API.WriteBatch(ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{w, ver, guard}})
	if status.Code(err) == codes.Aborted {
		// The environment changed (say so), or only the guard did: another
		// create or update of the namespace wrote first; start over.
		cur, rerr := o.API.Read(ctx, &pbresource.ReadRequest{Id: res.GetId(), Consistent: true})
		if rerr == nil && cur.GetResource().GetVersion() == res.GetVersion() {
			return nil, errGuardMoved
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
		case d.d.GetType() == DeploymentUser && d.d.GetStatus() == StatusInProgress:
			return nil, status.Errorf(codes.FailedPrecondition, "environment %s has deployment %s in progress: stop it first (trellis deployment stop %s %s)", name, d.res.GetId().GetName(), name, d.res.GetId().GetName())
		case d.d.GetStatus() == StatusPending:
			w, err := withDeployment(d.res, func(x *pbscheduler.Deployment) {
				x.Status, x.StatusReason, x.EndTime = StatusCanceled, "the environment is being deleted", now
			})
			if err != nil {
				return nil, err
			}
			writes = append(writes, w)
		}
	}
	next := proto.Clone(env).(*pbscheduler.Environment)
	next.Deleting, next.Status, next.UpdatedAt = true, EnvInactive, now
	w, err := withData(res, next)
	if err != nil {
		return nil, err
	}
	out, err := o.API.WriteBatch(ctx, &pbresource.WriteBatchRequest{Resources: append([]*pbresource.Resource{w}, writes...)})
	if err != nil {
		return nil, conflictf(err, "environment %s changed while it was being deleted; retry", name)
	}
	return out.GetResources()[0], nil
}

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
	if id := env.GetActiveDeployment(); id != "" {
		r, err := o.API.Read(ctx, &pbresource.ReadRequest{Id: DeploymentID(ns, id)})
		if err == nil {
			info.ActiveDeployment = r.GetResource()
		}
	}
	if v := env.GetDesiredVersion(); v != "" {
		r, err := o.API.Read(ctx, &pbresource.ReadRequest{Id: VersionID(ns, v)})
		if err == nil {
			info.DesiredVersion = r.GetResource()
		}
	}
	return info, nil
}

// ListEnvironments lists a namespace's environments, of one type when typ
// is set.
func (o *Operations) ListEnvironments(ctx context.Context, ns, typ string) ([]*pbresource.Resource, error) {
	list, err := o.API.List(ctx, &pbresource.ListRequest{Type: EnvironmentType, Tenancy: &pbresource.Tenancy{Namespace: ns}})
	if err != nil {
		return nil, err
	}
	if typ == "" {
		return list.GetResources(), nil
	}
	if typ != TypeDaemon {
		return nil, resource.NewFieldError("type", "must be %q (got %q)", TypeDaemon, typ)
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
	group, err := ParseGroup("instance_group", ver.GetInstanceGroup())
	if err != nil {
		return nil, err
	}
	instances, tasks, _, err := o.world(ctx, res)
	if err != nil {
		return nil, err
	}
	d := Diff(ver.GetTaskDefinition(), group, instances, tasks)
	d.Version, d.VersionNumber = uuid, ver.GetNumber()
	return d, nil
}

// Versions lists an environment's versions, newest first.
func (o *Operations) Versions(ctx context.Context, ns, name string) ([]*pbresource.Resource, error) {
	res, _, err := o.readEnvironment(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	owned, err := o.owned(ctx, res, EnvironmentVersionType)
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

// StartDeployment asks for version (a uuid or number; "" for the latest)
// to be deployed: a pending user deployment, which cancels any other
// pending one and starts once none is in progress. A version that is not
// the latest is stale and refused with a conflict: roll back to deploy an
// older one.
func (o *Operations) StartDeployment(ctx context.Context, ns, name, version string) (*pbresource.Resource, error) {
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
	return o.newUserDeployment(ctx, res, env, uuid, ver, "user")
}

func (o *Operations) newUserDeployment(ctx context.Context, res *pbresource.Resource, env *pbscheduler.Environment, uuid string, ver *pbscheduler.EnvironmentVersion, rollbackOf string) (*pbresource.Resource, error) {
	name, ns := res.GetId().GetName(), res.GetId().GetTenancy().GetNamespace()
	if env.GetDeleting() {
		return nil, status.Errorf(codes.FailedPrecondition, "environment %s is being deleted", name)
	}
	if _, _, err := o.taskDefinition(ctx, ns, "version", ver.GetTaskDefinition()); err != nil {
		return nil, err
	}
	deps, err := o.deployments(ctx, res)
	if err != nil {
		return nil, err
	}
	now := o.now()
	id, err := newDeploymentID(now)
	if err != nil {
		return nil, err
	}
	var writes []*pbresource.Resource
	for _, d := range deps {
		if d.d.GetType() == DeploymentUser && d.d.GetStatus() == StatusPending {
			w, err := withDeployment(d.res, func(x *pbscheduler.Deployment) {
				x.Status, x.StatusReason, x.EndTime = StatusCanceled, "replaced by deployment "+id, timestamppb.New(now)
			})
			if err != nil {
				return nil, err
			}
			writes = append(writes, w)
		}
	}
	d := &pbscheduler.Deployment{
		Environment: name, Version: uuid, VersionNumber: ver.GetNumber(), TaskDefinition: ver.GetTaskDefinition(),
		Type: DeploymentUser, Status: StatusPending, CreatedAt: timestamppb.New(now), RollbackOf: rollbackOf,
	}
	dr, err := newResource(DeploymentID(ns, id), res.GetId(), d)
	if err != nil {
		return nil, err
	}
	dr.Version = resource.CreateOnly
	// The environment rides along unchanged, at the version read: a
	// concurrent update or delete fails this batch.
	envGuard := &pbresource.Resource{Id: res.GetId(), Owner: res.GetOwner(), Version: res.GetVersion(), Metadata: res.GetMetadata(), Data: res.GetData()}
	out, err := o.API.WriteBatch(ctx, &pbresource.WriteBatchRequest{Resources: append([]*pbresource.Resource{dr, envGuard}, writes...)})
	if err != nil {
		return nil, conflictf(err, "environment %s changed while the deployment was being made; retry", name)
	}
	return out.GetResources()[0], nil
}

// StopDeployment halts a pending or in-progress deployment: tasks it
// started stay, and the environment becomes inactive.
func (o *Operations) StopDeployment(ctx context.Context, ns, name, id string) (*pbresource.Resource, error) {
	res, env, err := o.readEnvironment(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	dr, d, err := o.readDeployment(ctx, ns, name, id)
	if err != nil {
		return nil, err
	}
	if DeploymentDone(d.GetStatus()) {
		return nil, status.Errorf(codes.FailedPrecondition, "deployment %s is %s already: only a pending or in-progress deployment can be stopped", id, d.GetStatus())
	}
	now := timestamppb.New(o.now())
	next := proto.Clone(d).(*pbscheduler.Deployment)
	next.Status, next.StatusReason, next.EndTime = StatusStopped, "stopped by a user", now
	if d.GetStatus() == StatusPending {
		next.Status = StatusCanceled
	}
	dw, err := withData(dr, next)
	if err != nil {
		return nil, err
	}
	writes := []*pbresource.Resource{dw}
	if d.GetStatus() == StatusInProgress {
		e := proto.Clone(env).(*pbscheduler.Environment)
		e.Status, e.UpdatedAt = EnvInactive, now
		if e.ActiveDeployment == id {
			e.ActiveDeployment = ""
		}
		ew, err := withData(res, e)
		if err != nil {
			return nil, err
		}
		writes = append(writes, ew)
	}
	out, err := o.API.WriteBatch(ctx, &pbresource.WriteBatchRequest{Resources: writes})
	if err != nil {
		return nil, conflictf(err, "deployment %s changed while it was being stopped; retry", id)
	}
	return out.GetResources()[0], nil
}

// GetDeployment returns one deployment of an environment.
func (o *Operations) GetDeployment(ctx context.Context, ns, name, id string) (*pbresource.Resource, error) {
	res, _, err := o.readDeployment(ctx, ns, name, id)
	return res, err
}

// ListDeployments lists an environment's deployments, latest first.
func (o *Operations) ListDeployments(ctx context.Context, ns, name string) ([]*pbresource.Resource, error) {
	res, _, err := o.readEnvironment(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	out, err := o.owned(ctx, res, DeploymentType)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b *pbresource.Resource) int { return strings.Compare(b.GetId().GetName(), a.GetId().GetName()) })
	return out, nil
}

// --- reads and checks ---

func (o *Operations) readEnvironment(ctx context.Context, ns, name string) (*pbresource.Resource, *pbscheduler.Environment, error) {
	if err := resource.ValidateName("name", name); err != nil {
		return nil, nil, err
	}
	return readOne[*pbscheduler.Environment](ctx, o.API, EnvironmentID(ns, name), "environment")
}

func (o *Operations) readDeployment(ctx context.Context, ns, name, id string) (*pbresource.Resource, *pbscheduler.Deployment, error) {
	if err := resource.ValidateName("deployment", id); err != nil {
		return nil, nil, err
	}
	res, d, err := readOne[*pbscheduler.Deployment](ctx, o.API, DeploymentID(ns, id), "deployment")
	if err != nil {
		return nil, nil, err
	}
	if d.GetEnvironment() != name {
		return nil, nil, status.Errorf(codes.NotFound, "deployment %s is one of environment %s, not %s", id, d.GetEnvironment(), name)
	}
	return res, d, nil
}

// owned lists the versions or deployments of an environment with a
// strong read.
func (o *Operations) owned(ctx context.Context, env *pbresource.Resource, typ *pbresource.Type) ([]*pbresource.Resource, error) {
	return listOwned(ctx, o.API, env, typ, true)
}

func (o *Operations) deployments(ctx context.Context, env *pbresource.Resource) ([]*deployment, error) {
	owned, err := o.owned(ctx, env, DeploymentType)
	if err != nil {
		return nil, err
	}
	return decodeDeployments(owned), nil
}

// resolveVersion finds version (a uuid, a number, or "" for the latest)
// among the environment's versions.
func (o *Operations) resolveVersion(ctx context.Context, res *pbresource.Resource, env *pbscheduler.Environment, version string) (string, *pbscheduler.EnvironmentVersion, error) {
	name, ns := res.GetId().GetName(), res.GetId().GetTenancy().GetNamespace()
	if version == "" {
		version = env.GetLatestVersion()
	}
	if n, err := strconv.ParseInt(version, 10, 64); err == nil {
		vers, err := o.owned(ctx, res, EnvironmentVersionType)
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
	resp, err := o.API.Read(ctx, &pbresource.ReadRequest{Id: VersionID(ns, version), Consistent: true})
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
	if v.GetEnvironment() != name || v.GetEnvironmentUid() != res.GetId().GetUid() {
		return "", nil, resource.NewFieldError("version", "%s is a version of environment %s, not of %s", version, v.GetEnvironment(), name)
	}
	return version, v, nil
}

// previousVersion is what a rollback without a version returns to: the
// last version that completed a deployment, if it is not the one in
// place; else the newest other version a deployment completed; else the
// version numbered one below the one in place.
func (o *Operations) previousVersion(ctx context.Context, res *pbresource.Resource, env *pbscheduler.Environment) (string, error) {
	cur := env.GetDesiredVersion()
	if cur == "" {
		return "", status.Errorf(codes.FailedPrecondition, "environment %s has never been deployed: there is no earlier version to roll back to", res.GetId().GetName())
	}
	if v := env.GetLastCompletedVersion(); v != "" && v != cur {
		return v, nil
	}
	deps, err := o.deployments(ctx, res)
	if err != nil {
		return "", err
	}
	for i := len(deps) - 1; i >= 0; i-- {
		d := deps[i].d
		if d.GetType() == DeploymentUser && d.GetStatus() == StatusCompleted && d.GetVersion() != cur {
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

// checkSpec validates a spec, checks that its task definition is
// registered, and that no other daemon environment whose instance group
// can overlap runs the same task definition.
func (o *Operations) checkSpec(ctx context.Context, ns, name string, spec Spec) error {
	if err := ValidateSpec("", spec.Type, spec.TaskDefinition, spec.InstanceGroup, spec.Deployment); err != nil {
		return err
	}
	if _, _, err := o.taskDefinition(ctx, ns, "task_definition", spec.TaskDefinition); err != nil {
		return err
	}
	mine, err := ParseGroup("instance_group", spec.InstanceGroup)
	if err != nil {
		return err
	}
	envs, err := o.API.List(ctx, &pbresource.ListRequest{Type: EnvironmentType, Tenancy: &pbresource.Tenancy{Namespace: ns}, Consistent: true})
	if err != nil {
		return err
	}
	for _, r := range envs.GetResources() {
		if r.GetId().GetName() == name {
			continue
		}
		other, err := resource.DecodeData[*pbscheduler.Environment](r)
		if err != nil || other.GetDeleting() || other.GetType() != TypeDaemon {
			continue
		}
		if other.GetTaskDefinition() != spec.TaskDefinition && other.GetDesiredTaskDefinition() != spec.TaskDefinition {
			continue
		}
		g, err := ParseGroup("instance_group", other.GetInstanceGroup())
		if err != nil {
			continue
		}
		if Overlap(mine, g) {
			return resource.NewFieldError("instance_group", "can overlap the instance group of environment %s, which runs the same task definition %s: two daemons of one task definition on one instance are not allowed; make the groups exclusive (e.g. role=a and role!=a) or use another task definition", r.GetId().GetName(), spec.TaskDefinition)
		}
	}
	return nil
}

// taskDefinition reads family:revision in ns, refusing one that is not
// registered (field names the field in the error).
func (o *Operations) taskDefinition(ctx context.Context, ns, field, ref string) (*pbresource.Resource, *pborch.TaskDefinition, error) {
	family, rev, err := orchestrator.ParseTaskDefinitionRef(ref)
	if err != nil {
		return nil, nil, resource.NewFieldError(field, "%v", err)
	}
	resp, err := o.API.Read(ctx, &pbresource.ReadRequest{Id: orchestrator.TaskDefinitionID(ns, family, rev), Consistent: true})
	if status.Code(err) == codes.NotFound {
		return nil, nil, resource.NewFieldError(field, "task definition %s is not registered in namespace %s (register it with `trellis taskdef register`)", ref, ns)
	}
	if err != nil {
		return nil, nil, err
	}
	td, err := resource.DecodeData[*pborch.TaskDefinition](resp.GetResource())
	return resp.GetResource(), td, err
}

// state computes an environment's view from the store.
func (o *Operations) state(ctx context.Context, res *pbresource.Resource, env *pbscheduler.Environment) (*pbscheduler.EnvironmentState, error) {
	instances, tasks, numbers, err := o.world(ctx, res)
	if err != nil {
		return nil, err
	}
	g := env.GetInstanceGroup()
	if v := env.GetDesiredVersion(); v != "" {
		if r, err := o.API.Read(ctx, &pbresource.ReadRequest{Id: VersionID(res.GetId().GetTenancy().GetNamespace(), v)}); err == nil {
			if ver, err := resource.DecodeData[*pbscheduler.EnvironmentVersion](r.GetResource()); err == nil {
				g = ver.GetInstanceGroup()
			}
		}
	}
	group, err := ParseGroup("instance_group", g)
	if err != nil {
		return nil, err
	}
	return State(group, instances, tasks, numbers), nil
}

// world reads the instances, the environment's tasks and the numbers of
// its versions.
func (o *Operations) world(ctx context.Context, res *pbresource.Resource) ([]InstanceView, []TaskView, map[string]int64, error) {
	owned, err := o.API.ListByOwner(ctx, &pbresource.ListByOwnerRequest{Owner: res.GetId()})
	if err != nil {
		return nil, nil, nil, err
	}
	var tasks []TaskView
	numbers := map[string]int64{}
	for _, r := range owned.GetResources() {
		switch {
		case ids.SameType(r.GetId().GetType(), orchestrator.TaskType):
			if t, err := resource.DecodeData[*pborch.Task](r); err == nil {
				tasks = append(tasks, taskView(res.GetId().GetName(), r, t))
			}
		case ids.SameType(r.GetId().GetType(), EnvironmentVersionType):
			if v, err := resource.DecodeData[*pbscheduler.EnvironmentVersion](r); err == nil {
				numbers[r.GetId().GetName()] = v.GetNumber()
			}
		}
	}
	list, err := o.API.List(ctx, &pbresource.ListRequest{Type: orchestrator.InstanceType, Tenancy: &pbresource.Tenancy{}})
	if err != nil {
		return nil, nil, nil, err
	}
	var instances []InstanceView
	for _, r := range list.GetResources() {
		if v, ok := instanceView(r); ok {
			instances = append(instances, v)
		}
	}
	return instances, tasks, numbers, nil
}

func versionResource(ns, uuid string, owner *pbresource.ID, env string, number int64, e *pbscheduler.Environment, now time.Time) (*pbresource.Resource, error) {
	v := &pbscheduler.EnvironmentVersion{
		Environment: env, EnvironmentUid: owner.GetUid(), Number: number, TaskDefinition: e.GetTaskDefinition(),
		InstanceGroup: e.GetInstanceGroup(), Deployment: e.GetDeployment(), Role: e.GetRole(), CreatedAt: timestamppb.New(now),
	}
	res, err := newResource(VersionID(ns, uuid), owner, v)
	if err != nil {
		return nil, err
	}
	res.Version = resource.CreateOnly
	return res, nil
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

// errGuardMoved: another create or update of the namespace wrote between
// an operation's checks and its write; the operation starts over.
var errGuardMoved = errors.New("another environment operation of the namespace went first")

// maxGuardTries bounds how often an operation starts over for that.
const maxGuardTries = 5

// guarded runs op until it ends other than by errGuardMoved.
func guarded(op func() (*EnvironmentResult, error)) (*EnvironmentResult, error) {
	for try := 1; ; try++ {
		r, err := op()
		if !errors.Is(err, errGuardMoved) {
			return r, err
		}
		if try == maxGuardTries {
			return nil, status.Errorf(codes.Aborted, "other environment operations of the namespace kept going first (%d tries); retry", try)
		}
	}
}

// guardWrite reads namespace ns's EnvironmentGuard and returns the write
// that bumps it: a compare-and-swap on the version read, or create-only
// when there is none yet. Read before the checks, written with the change,
// it fails the write if any other checked change landed in between.
func (o *Operations) guardWrite(ctx context.Context, ns string) (*pbresource.Resource, error) {
	resp, err := o.API.Read(ctx, &pbresource.ReadRequest{Id: GuardID(ns), Consistent: true})
	switch {
	case status.Code(err) == codes.NotFound:
		res, err := newResource(GuardID(ns), nil, &pbscheduler.EnvironmentGuard{Changes: 1})
		if err != nil {
			return nil, err
		}
		res.Version = resource.CreateOnly
		return res, nil
	case err != nil:
		return nil, err
	}
	g, err := resource.DecodeData[*pbscheduler.EnvironmentGuard](resp.GetResource())
	if err != nil {
		return nil, err
	}
	g.Changes++
	return withData(resp.GetResource(), g)
}

// conflictf turns a CAS failure into a conflict that says what to do.
func conflictf(err error, format string, args ...any) error {
	if status.Code(err) == codes.Aborted {
		return status.Errorf(codes.Aborted, format, args...)
	}
	return err
}
