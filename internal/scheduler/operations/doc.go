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
//
// The operations write an environment's data (its spec) and its
// deployments, never its status, which the controller alone reports:
// stopping a deployment writes the deployment, and the controller makes
// the environment inactive as it reads it. A deployment made while the
// controller reports the environment's status is made again rather than
// refused, as long as the environment's generation is the one read.
package operations
