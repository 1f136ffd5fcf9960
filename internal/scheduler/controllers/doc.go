// Package controllers holds the daemon scheduler's controller, which runs
// on the leader (controller.Manager). Its requests are environments; it
// watches their deployments and tasks and every instance.
//
// A reconcile (reconcile.go) reads an environment, what it owns and the
// instances, mostly from a cache the watches keep (cache.go); computes
// the plan and the deployments' progress with the scheduler's pure
// decisions; and writes both in one batch, chunked for large fleets
// (write.go). Around it: the deployment lifecycle, which starts the newest
// pending user deployment, writes a plan's placements and stops, records
// progress and starts an auto-rollback (deployments.go); the teardown of
// an environment being deleted (teardown.go); the clean-up of old tasks
// and deployments (collect.go). The controller runtime paces each
// environment's runs by their work, to bound the leader's CPU under a
// stream of changes (controller.go declares it).
package controllers
