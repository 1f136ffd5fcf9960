package scheduler

import (
	"strings"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// MutateEnvironment fills in the defaults of an environment: type daemon,
// cluster default.
func MutateEnvironment(res *pbresource.Resource) error {
	return resource.MutateData(res, func(e *pbscheduler.Environment) {
		if e.Type == "" {
			e.Type = TypeDaemon
		}
		if e.InstanceGroup == nil {
			e.InstanceGroup = &pbscheduler.InstanceGroup{}
		}
		if e.InstanceGroup.Cluster == "" {
			e.InstanceGroup.Cluster = DefaultCluster
		}
	})
}

// ValidateEnvironment checks an environment's spec.
func ValidateEnvironment(res *pbresource.Resource) error {
	e, err := resource.DecodeData[*pbscheduler.Environment](res)
	if err != nil {
		return err
	}
	if err := ValidateSpec("data", e.GetType(), e.GetTaskDefinition(), e.GetInstanceGroup(), e.GetDeployment()); err != nil {
		return err
	}
	if len(res.GetId().GetName()) > MaxEnvironmentName {
		return resource.NewFieldError("id.name", "%q is longer than %d characters: an environment's name is part of its tasks' names", res.GetId().GetName(), MaxEnvironmentName)
	}
	return nil
}

// MaxEnvironmentName leaves room in a task's 63-character name for the
// instance hash and the sequence number (see TaskName).
const MaxEnvironmentName = 40

// ValidateSpec checks the fields people write, naming them under prefix.
func ValidateSpec(prefix, typ, taskdef string, g *pbscheduler.InstanceGroup, c *pbscheduler.DeploymentConfig) error {
	if typ != TypeDaemon {
		return resource.NewFieldError(join(prefix, "type"), "must be %q (got %q): the daemon scheduler is the one scheduler so far", TypeDaemon, typ)
	}
	if taskdef == "" {
		return resource.NewFieldError(join(prefix, "task_definition"), "is required (family:revision)")
	}
	if _, rev, err := orchestrator.ParseTaskDefinitionRef(taskdef); err != nil {
		return resource.NewFieldError(join(prefix, "task_definition"), "%v", err)
	} else if rev == 0 {
		return resource.NewFieldError(join(prefix, "task_definition"), "%q names no revision: write family:revision, so that a version always means the same tasks", taskdef)
	}
	if g.GetCluster() != "" {
		if err := resource.ValidateName(join(prefix, "instance_group.cluster"), g.GetCluster()); err != nil {
			return err
		}
	}
	if _, err := ParseGroup(join(prefix, "instance_group"), g); err != nil {
		return err
	}
	if _, err := ParseRollout(join(prefix, "deployment"), c); err != nil {
		return err
	}
	return nil
}

// join is prefix.field, or field alone without a prefix.
func join(prefix, field string) string {
	if prefix == "" {
		return field
	}
	return prefix + "." + field
}

// ValidateEnvironmentVersion checks a version snapshot.
func ValidateEnvironmentVersion(res *pbresource.Resource) error {
	v, err := resource.DecodeData[*pbscheduler.EnvironmentVersion](res)
	if err != nil {
		return err
	}
	if err := resource.ValidateName("data.environment", v.GetEnvironment()); err != nil {
		return err
	}
	if v.GetNumber() < 1 {
		return resource.NewFieldError("data.number", "must be 1 or more (got %d)", v.GetNumber())
	}
	return ValidateSpec("data", TypeDaemon, v.GetTaskDefinition(), v.GetInstanceGroup(), v.GetDeployment())
}

// ValidateDeployment checks a deployment.
func ValidateDeployment(res *pbresource.Resource) error {
	d, err := resource.DecodeData[*pbscheduler.Deployment](res)
	if err != nil {
		return err
	}
	if err := resource.ValidateName("data.environment", d.GetEnvironment()); err != nil {
		return err
	}
	if d.GetVersion() == "" {
		return resource.NewFieldError("data.version", "is required: a deployment deploys one version of its environment")
	}
	switch d.GetType() {
	case DeploymentUser, DeploymentNewInstance, DeploymentHealthRepair:
	default:
		return resource.NewFieldError("data.type", "must be one of %s (got %q)", strings.Join([]string{DeploymentUser, DeploymentNewInstance, DeploymentHealthRepair}, ", "), d.GetType())
	}
	// The progress is the scheduler's status; a deployment stored before
	// it moved there carries it in its data, and stays writable (a stop).
	if s := d.GetStatus(); s != "" && !isDeploymentStatus(s) {
		return resource.NewFieldError("data.status", "is not a deployment status (got %q)", s)
	}
	if stop := d.GetStop(); stop != nil {
		if stop.GetAt() == nil {
			return resource.NewFieldError("data.stop.at", "is required: when the stop was asked for")
		}
		if stop.GetReason() == "" {
			return resource.NewFieldError("data.stop.reason", "is required: it becomes the deployment's status_reason")
		}
	}
	return nil
}
