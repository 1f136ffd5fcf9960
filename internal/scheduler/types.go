package scheduler

import (
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/resource"
)

// APIGroup and GroupVersion of the scheduler's types.
const (
	APIGroup     = "scheduler"
	GroupVersion = "v1"
)

// The scheduler's resource types, all namespaced.
var (
	EnvironmentType        = &pbresource.Type{Group: APIGroup, GroupVersion: GroupVersion, Kind: "Environment"}
	EnvironmentVersionType = &pbresource.Type{Group: APIGroup, GroupVersion: GroupVersion, Kind: "EnvironmentVersion"}
	DeploymentType         = &pbresource.Type{Group: APIGroup, GroupVersion: GroupVersion, Kind: "Deployment"}
)

// EnvironmentsPath is the HTTP path of the environment operations, through
// which alone environments are created and changed.
const EnvironmentsPath = "/v1/environments"

// Vocabulary of the scheduler's types.
const (
	TypeDaemon = "daemon"

	EnvActive   = "active"
	EnvInactive = "inactive"

	HealthHealthy   = "healthy"
	HealthUnhealthy = "unhealthy"

	DeploymentUser         = "user"
	DeploymentNewInstance  = "new-instance"
	DeploymentHealthRepair = "health-repair"

	StatusPending    = "pending"
	StatusInProgress = "in-progress"
	StatusCompleted  = "completed"
	StatusStopped    = "stopped"
	StatusCanceled   = "canceled"
	StatusUnhealthy  = "unhealthy"
	StatusTimedOut   = "timed-out"
)

// DeploymentDone reports whether a deployment status is final.
func DeploymentDone(status string) bool {
	switch status {
	case StatusPending, StatusInProgress:
		return false
	}
	return true
}

// deleteEnvironment is the operation that deletes an environment, which
// the generic delete of the scheduler's types points to.
const deleteEnvironment = "use DELETE /v1/environments/{name} (trellis env delete), which refuses while a deployment is in progress and stops the environment's tasks before it removes it, its versions and its deployments"

// Register registers the scheduler's types.
func Register(r *resource.Registry) {
	r.Register(resource.Registration{
		Type:     EnvironmentType,
		Proto:    &pbscheduler.Environment{},
		Scope:    resource.ScopeNamespace,
		Mutate:   MutateEnvironment,
		Validate: ValidateEnvironment,
		// A create or update checks the other environments for overlap
		// and writes a version with the change: /v1/resources cannot.
		WrittenThrough: EnvironmentsPath,
		// Its delete refuses while a user deployment is in progress,
		// cancels a pending one and stops its tasks before the
		// controller removes it: a generic delete would skip all three.
		DeletedThrough: deleteEnvironment,
		Statuses: map[string]resource.StatusPayload{
			StatusKey: {Owner: resource.StatusOwner{Controller: StatusKey}, Proto: &pbscheduler.EnvironmentStatus{}, Validate: validateEnvironmentStatus},
		},
	})
	r.Register(resource.Registration{
		Type:      EnvironmentVersionType,
		Proto:     &pbscheduler.EnvironmentVersion{},
		Scope:     resource.ScopeNamespace,
		Immutable: true,
		Validate:  ValidateEnvironmentVersion,
		// A version is made by an environment's create or update, as its
		// record: written alone it would be one no environment asked for.
		// It goes with its environment, and is what a rollback deploys.
		WrittenThrough: EnvironmentsPath,
		DeletedThrough: "a version is the record of its environment's changes and goes with it: " + deleteEnvironment,
	})
	r.Register(resource.Registration{
		Type:     DeploymentType,
		Proto:    &pbscheduler.Deployment{},
		Scope:    resource.ScopeNamespace,
		Validate: ValidateDeployment,
		// A deployment is started through its environment (which checks
		// the version and that no other is in progress) and moved on by
		// the scheduler, which also keeps the last 50 finished ones.
		WrittenThrough: EnvironmentsPath,
		DeletedThrough: "a deployment is stopped with POST /v1/environments/{name}/deployments/{id}/stop (trellis deployment stop), and deleted by the scheduler (it keeps an environment's last 50 finished ones) or with its environment: " + deleteEnvironment,
		// Its data is the request; the scheduler's progress is its
		// status, which the controller alone writes (deployment.go).
		Statuses: map[string]resource.StatusPayload{
			StatusKey: {Owner: resource.StatusOwner{Controller: StatusKey}, Proto: &pbscheduler.DeploymentProgress{}, Validate: validateDeploymentProgress},
		},
	})
}

// EnvironmentID is the id of the environment name in namespace ns.
func EnvironmentID(ns, name string) *pbresource.ID {
	return &pbresource.ID{Type: EnvironmentType, Tenancy: &pbresource.Tenancy{Namespace: ns}, Name: name}
}

// VersionID is the id of the EnvironmentVersion uuid in namespace ns.
func VersionID(ns, uuid string) *pbresource.ID {
	return &pbresource.ID{Type: EnvironmentVersionType, Tenancy: &pbresource.Tenancy{Namespace: ns}, Name: uuid}
}

// DeploymentID is the id of the Deployment id in namespace ns.
func DeploymentID(ns, id string) *pbresource.ID {
	return &pbresource.ID{Type: DeploymentType, Tenancy: &pbresource.Tenancy{Namespace: ns}, Name: id}
}
