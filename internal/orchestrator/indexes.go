package orchestrator

import (
	"trellis.dev/trellis/internal/controller"
)

// LiveTasksByInstance is the index of the controllers' cache
// (controller.Cache) that files a task under the instance it is placed on
// until its agent reports it STOPPED (a LOST task stays: its agent may
// come back with it), and no other task: the tasks that may hold host
// ports there (PortHolders), and those the task controller may mark LOST
// when the instance goes down. A task leaves it when it stops or is
// deleted; the runtime keeps it. It is declared once here so that every
// controller and operation that looks tasks up by instance shares one
// index. An environment's tasks are found by their owner, the cache's
// built-in controller.IndexOwner.
var LiveTasksByInstance = &controller.Index{Name: "live-on-instance", Keys: func(o *controller.Object) []string {
	if instance := liveInstance(o); instance != "" {
		return []string{instance}
	}
	return nil
}}
