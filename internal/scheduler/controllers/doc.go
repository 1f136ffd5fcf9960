// Package controllers holds the daemon scheduler's controller, which runs
// on the leader (controller.Manager). Its requests are environments; it
// watches their deployments and tasks and every instance.
//
// A reconcile (reconcile.go) reads an environment and its versions and
// deployments from the store, and its tasks and the instances from the
// controllers' cache (controller.Cache), with the indexes and the task
// views it declares there and the runtime keeps (views.go: its mappers
// only map); computes
// the plan and the deployments' progress with the scheduler's pure
// decisions; and writes both in one batch, chunked for large fleets, the
// progress as status entries of the last chunk (write.go). Around it: the deployment lifecycle, which starts the newest
// pending user deployment, writes a plan's placements and stops, records
// progress and starts an auto-rollback (deployments.go); the teardown of
// an environment being deleted (teardown.go); the clean-up of old tasks
// and deployments (collect.go). The controller runtime paces each
// environment's runs by their work, to bound the leader's CPU under a
// stream of changes (controller.go declares it).
//
// The environment's data is the user's; the controller never writes it.
// What it makes of the environment (active or not, healthy or not, the
// desired version, the active deployment) it reports in the environment's
// status under scheduler.StatusKey. A deployment's data is its request,
// which only its creator and a user's stop write; the controller reports
// its progress in the deployment's status under the same key
// (scheduler.ReportProgress, a CAS on the deployment read, so that a stop
// meanwhile fails the run). Both reports are status entries of the plan's
// last WriteBatch (writeAll, in write.go; alone in one WriteStatuses when
// there is no plan to write): a run that places and reports is one
// commit, and the status is never stored without what it follows from. The status is decided by scheduler.ReportStatus from the
// deployments alone, at every read as well, so a run that ended between
// its two writes is caught up by the next: a deployment started but not
// yet reported is adopted as the active one, one that ended is folded in.
package controllers
