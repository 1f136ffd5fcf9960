// Package operations holds the daemon scheduler's user operations: what
// people call, through the HTTP API, to create, change and delete
// environments (environments.go), start, stop and roll back deployments
// (deployments.go), and look at environments, their state and versions
// (views.go). Each is a few reads and one CAS write or batch; the
// controller (package controllers) does the rest. Checks of a spec
// (checks.go) and of concurrent changes to a namespace (guard.go) run
// before anything is written.
package operations
