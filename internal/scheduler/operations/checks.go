package operations

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
)

// checkSpec validates a spec, checks that its task definition is
// registered, and that no other daemon environment whose instance group
// can overlap runs the same task definition. It returns the compare that
// keeps the overlap check true until the write it goes with
// (environmentsUnchanged).
func (o *Operations) checkSpec(ctx context.Context, ns, name string, spec Spec) (*pbresource.Compare, error) {
	if err := scheduler.ValidateSpec("", spec.Type, spec.TaskDefinition, spec.InstanceGroup, spec.Deployment); err != nil {
		return nil, err
	}
	if _, _, err := o.taskDefinition(ctx, ns, "task_definition", spec.TaskDefinition); err != nil {
		return nil, err
	}
	mine, err := scheduler.ParseGroup("instance_group", spec.InstanceGroup)
	if err != nil {
		return nil, err
	}
	envs, err := o.API.List(ctx, &pbresource.ListRequest{Type: scheduler.EnvironmentType, Tenancy: &pbresource.Tenancy{Namespace: ns}, Consistent: true})
	if err != nil {
		return nil, err
	}
	if err := checkOverlap(name, spec, mine, envs.GetResources()); err != nil {
		return nil, err
	}
	return environmentsUnchanged(ns, envs.GetResources()), nil
}

// checkOverlap refuses a daemon whose instance group (mine) can overlap
// that of another environment running the same task definition.
func checkOverlap(name string, spec Spec, mine scheduler.Group, envs []*pbresource.Resource) error {
	for _, r := range envs {
		if r.GetId().GetName() == name {
			continue
		}
		other, err := resource.DecodeData[*pbscheduler.Environment](r)
		if err != nil || other.GetDeleting() || other.GetType() != scheduler.TypeDaemon {
			continue
		}
		if other.GetTaskDefinition() != spec.TaskDefinition && desiredTaskDefinition(r) != spec.TaskDefinition {
			continue
		}
		g, err := scheduler.ParseGroup("instance_group", other.GetInstanceGroup())
		if err != nil {
			continue
		}
		if scheduler.Overlap(mine, g) {
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

// desiredTaskDefinition is the task definition the scheduler keeps running
// for an environment, "" when it has none or its status does not decode.
func desiredTaskDefinition(res *pbresource.Resource) string {
	st, err := scheduler.EnvironmentStatusOf(res)
	if err != nil {
		return ""
	}
	return st.GetDesiredTaskDefinition()
}
