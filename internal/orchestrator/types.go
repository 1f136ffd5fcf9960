package orchestrator

import (
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// Group and GroupVersion of the orchestrator's types.
const (
	Group        = "orchestrator"
	GroupVersion = "v1"
)

// The orchestrator's resource types.
var (
	// InstanceType is cluster-scoped: a machine serves every namespace.
	InstanceType       = &pbresource.Type{Group: Group, GroupVersion: GroupVersion, Kind: "Instance"}
	TaskDefinitionType = &pbresource.Type{Group: Group, GroupVersion: GroupVersion, Kind: "TaskDefinition"}
	TaskType           = &pbresource.Type{Group: Group, GroupVersion: GroupVersion, Kind: "Task"}
)

// Register registers the orchestrator's types.
func Register(r *resource.Registry) {
	r.Register(resource.Registration{
		Type:     InstanceType,
		Proto:    &pborch.Instance{},
		Scope:    resource.ScopeCluster,
		Mutate:   MutateInstance,
		Validate: ValidateInstance,
		Statuses: map[string]resource.StatusPayload{
			// Its agent's registration: that instance's agent alone
			// (AgentService.Register).
			AgentStatusKey: {Owner: resource.StatusOwner{AgentOf: instanceSelf}, Proto: &pborch.AgentRegistration{}, Validate: ValidateAgentRegistration},
			// That it is down: the instance controller.
			DownStatusKey: {Owner: resource.StatusOwner{Controller: DownStatusKey}, Proto: &pborch.InstanceDown{}, Validate: ValidateInstanceDown},
		},
	})
	r.Register(resource.Registration{
		Type:      TaskDefinitionType,
		Proto:     &pborch.TaskDefinition{},
		Scope:     resource.ScopeNamespace,
		Immutable: true,
		Mutate:    MutateTaskDefinition,
		Validate:  ValidateTaskDefinition,
	})
	r.Register(resource.Registration{
		Type:           TaskType,
		Proto:          &pborch.Task{},
		Scope:          resource.ScopeNamespace,
		Mutate:         MutateTask,
		Validate:       ValidateTask,
		ValidateUpdate: ValidateTaskUpdate,
		Statuses: map[string]resource.StatusPayload{
			// What happens to the task: its instance's agent alone says.
			TaskStatusKey: {Owner: resource.StatusOwner{AgentOf: taskInstance}, Proto: &pborch.TaskStatus{}, Validate: ValidateTaskStatus},
			// That it was lost with its instance: the task controller.
			LostStatusKey: {Owner: resource.StatusOwner{Controller: LostStatusKey}, Proto: &pborch.TaskLost{}, Validate: ValidateTaskLost},
		},
	})
}

// taskInstance is the instance a stored task is placed on, whose agent
// owns its status["agent"].
func taskInstance(res *pbresource.Resource) (string, error) {
	t, err := resource.DecodeData[*pborch.Task](res)
	if err != nil {
		return "", err
	}
	return t.GetInstance(), nil
}

// InstanceID is the id of the Instance called name.
func InstanceID(name string) *pbresource.ID {
	return &pbresource.ID{Type: InstanceType, Tenancy: &pbresource.Tenancy{}, Name: name}
}

// TaskDefinitionID is the id of family:revision in namespace ns.
func TaskDefinitionID(ns, family string, revision int64) *pbresource.ID {
	return &pbresource.ID{Type: TaskDefinitionType, Tenancy: &pbresource.Tenancy{Namespace: ns}, Name: TaskDefinitionName(family, revision)}
}

// TaskID is the id of the Task called name in namespace ns.
func TaskID(ns, name string) *pbresource.ID {
	return &pbresource.ID{Type: TaskType, Tenancy: &pbresource.Tenancy{Namespace: ns}, Name: name}
}
