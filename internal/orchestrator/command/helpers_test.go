package command

import (
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
)

// testTypes are the types a server serves, registered as server.Types
// does (that package is too heavy for these tests to import).
func testTypes() *resource.Registry {
	r := resource.NewRegistry()
	core.Register(r)
	orchestrator.Register(r)
	scheduler.Register(r)
	return r
}
