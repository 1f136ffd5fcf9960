// Package scheduler is the daemon scheduler of seed 002: environments
// (one daemon each: a task definition kept on every instance of an
// instance group), their immutable versions, and the deployments that
// roll a version out.
//
// This package holds what both sides of the domain share: the resource
// types with their registration, validation and names (types.go,
// validate.go, names.go), how stored resources are built and read
// (resources.go, reads.go), and the decisions, pure functions over plain
// values: which instances an instance group selects (group.go, match.go),
// what to place, replace or stop on each instance (decide.go, which
// plan.go asks for every instance as it walks the instances and tasks),
// how a deployment progresses (progress.go), what a deployment is from
// its request (data) and the scheduler's progress (status), merged by one
// pure MergeDeployment that every reader goes through (deployment.go),
// what an environment's state is (state.go), and what the scheduler
// reports of an environment in its status, given its deployments
// (status.go).
//
// Below it, package controllers holds the controller that runs on the
// leader: it reads the store, calls the decisions, and applies their
// result with CAS batch writes. Package operations holds what users call
// (create, update, deploy, stop, roll back, look). The operations never
// import the controller: all progress lives in resources, so a new leader
// resumes a deployment where the old one stopped, and an operation only
// writes what the controller will read. Package schedulertest is the
// harness both are tested with.
package scheduler
