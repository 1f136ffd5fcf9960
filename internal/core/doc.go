// Package core registers the resource types every other part of Trellis
// stands on. For now that is core/v1/Namespace, the unit of tenancy.
//
// The rules of tenancy themselves (a namespaced resource needs an existing
// Namespace; "default" always exists and cannot be deleted; only an empty
// Namespace can be deleted) belong to the generic resource service, which
// enforces them for every type; this package only gives the Namespace type
// its data message, its validation, and the bootstrap that stores "default"
// when a server gains leadership.
package core
