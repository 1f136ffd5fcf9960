package catalog

import (
	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
)

// The checks of an instance of a task, as mesh-init defines them when it
// registers the instance and health-sync reports them: one per essential
// container with a health check, named TaskCheckName(task, container); a
// task with none has one check named after the task, passing while it
// runs (seed 000: the task's own health stands for the instance).

// TaskCheckName names the check of a task's container.
func TaskCheckName(task, container string) string { return task + "/" + container }

// TaskCheckDefinitions are the check definitions of the instance of task,
// a task of definition td, in the order of td's containers.
func TaskCheckDefinitions(task string, td *pborch.TaskDefinition) []*pbcatalog.CheckDefinition {
	var out []*pbcatalog.CheckDefinition
	for _, c := range td.GetContainers() {
		essential := c.Essential == nil || c.GetEssential() // true unless said otherwise, as stored definitions say
		if essential && c.GetHealthCheck() != nil {
			out = append(out, &pbcatalog.CheckDefinition{Name: TaskCheckName(task, c.GetName())})
		}
	}
	if len(out) == 0 {
		out = append(out, &pbcatalog.CheckDefinition{Name: task})
	}
	return out
}
