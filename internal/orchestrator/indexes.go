package orchestrator

import (
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/controller"
)

// Indexes of the controllers' cache (controller.Cache) over the
// orchestrator's types, declared once here so that every controller that
// looks tasks up the same way shares one index.
var (
	// TasksByInstance files a task under the instance it is placed on,
	// whatever its state; an unplaced task, or one whose data does not
	// decode, is not filed.
	TasksByInstance = &controller.Index{Name: "instance", Keys: func(o *controller.Object) []string {
		if t, ok := controller.Decoded[*pborch.Task](o); ok && t.GetInstance() != "" {
			return []string{t.GetInstance()}
		}
		return nil
	}}
	// TasksByEnvironment files a task placed by a daemon environment under
	// EnvironmentKey of it (data.environment, in the task's namespace). A
	// task run by hand is not filed. The built-in controller.IndexOwner
	// finds the same tasks by their owner.
	TasksByEnvironment = &controller.Index{Name: "environment", Keys: func(o *controller.Object) []string {
		if t, ok := controller.Decoded[*pborch.Task](o); ok && t.GetEnvironment() != "" {
			return []string{EnvironmentKey(o.Resource.GetId().GetTenancy().GetNamespace(), t.GetEnvironment())}
		}
		return nil
	}}
)

// EnvironmentKey is the key of an environment in TasksByEnvironment.
func EnvironmentKey(namespace, name string) string { return namespace + "/" + name }
