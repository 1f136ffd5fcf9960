// Package core registers the resource types every other part of Trellis
// stands on: core/v1/Namespace, the unit of tenancy, and core/v1/Cluster,
// the cluster's identity (a uuid fixed at its first start, of which the
// Connect CA makes its trust domain; ClusterID reads it).
//
// The rules of tenancy themselves (a namespaced resource needs an existing
// Namespace; "default" always exists and cannot be deleted; only an empty
// Namespace can be deleted) belong to the generic resource service, which
// enforces them for every type; this package only gives the Namespace type
// its data message, its validation, and the bootstrap that stores "default"
// (and the cluster id, the first time) when a server gains leadership.
package core
