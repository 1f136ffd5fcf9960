package server

import (
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
)

// Types returns a registry of every resource type a server serves. The
// server uses it when its Config names none; the CLI uses it to check a
// spec file against the same types and hooks before it sends anything.
func Types() *resource.Registry {
	r := resource.NewRegistry()
	core.Register(r)
	orchestrator.Register(r)
	scheduler.Register(r)
	return r
}
