package core

import (
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
)

// Module returns the core as a module of the server: the Namespace type.
// It has no parts of its own: the tenancy rules are the resource
// service's, and the server itself runs Bootstrap, since "default" must
// exist before the HTTP API opens whatever modules it serves.
func Module() module.Module { return coreModule{} }

type coreModule struct{}

func (coreModule) Name() string                            { return "core" }
func (coreModule) Register(r *resource.Registry)           { Register(r) }
func (coreModule) Setup(module.Deps) (module.Parts, error) { return module.Parts{}, nil }
