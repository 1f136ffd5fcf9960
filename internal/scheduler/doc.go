// Package scheduler is the daemon scheduler of seed 002: environments
// (one daemon each: a task definition kept on every instance of an
// instance group), their immutable versions, and the deployments that
// roll a version out.
//
// The decisions are pure functions over plain values: which instances an
// instance group selects (group.go), what to place, replace or stop on
// each instance (plan.go), how a deployment progresses (progress.go) and
// what an environment's state is (state.go). The controller (controller.go)
// reads the store, calls them, and applies their result with CAS batch
// writes; the operations (operations.go) are what users call. All
// progress lives in resources, so a new leader resumes a deployment where
// the old one stopped.
package scheduler
