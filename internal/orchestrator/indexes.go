package orchestrator

import (
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/controller"
)

// TasksByInstance is the index of the controllers' cache
// (controller.Cache) that files a task under the instance it is placed on,
// whatever its state; an unplaced task, or one whose data does not decode,
// is not filed. It is declared once here so that every controller that
// looks tasks up by instance shares one index. An environment's tasks are
// found by their owner, the cache's built-in controller.IndexOwner.
var TasksByInstance = &controller.Index{Name: "instance", Keys: func(o *controller.Object) []string {
	if t, ok := controller.Decoded[*pborch.Task](o); ok && t.GetInstance() != "" {
		return []string{t.GetInstance()}
	}
	return nil
}}
