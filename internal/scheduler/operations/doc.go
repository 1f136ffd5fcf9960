// Package operations holds the daemon scheduler's user operations: what
// people call, through the HTTP API, to create, change and delete
// environments (environments.go), start, stop and roll back deployments
// (deployments.go), and look at environments, their state and versions
// (views.go). Each is a few reads and one CAS write or batch; the
// controller (package controllers) does the rest. A spec is checked
// (checks.go) before anything is written, and the write carries a compare
// that keeps the check true until it lands, or starts it over
// (rechecked.go). Environments are written only through these operations
// and the controller (resource.FromOperations).
package operations
