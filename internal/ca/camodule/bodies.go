package camodule

import "trellis.dev/trellis/internal/ca/caapi"

// The bodies of the CA's routes are defined in caapi, which the CLI reads
// without depending on this package (the module hands the CLI its
// commands, internal/ca/command); these names keep the routes' code and
// tests as they were.
type (
	RootsBody       = caapi.RootsBody
	RootBody        = caapi.RootBody
	ConfigBody      = caapi.ConfigBody
	ConfigRequest   = caapi.ConfigRequest
	SignRequestBody = caapi.SignRequestBody
	SignBody        = caapi.SignBody
)
