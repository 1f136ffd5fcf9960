// Package healthsync is health-sync, the agent's component that keeps the
// catalog's checks of a mesh task's service instance equal to the task's
// health as the agent sees it: seed 000's health-sync container, done by
// the agent itself.
//
// mesh-init registers the instance with its check definitions; the task
// manager tells health-sync each change of the task's health
// (component.HealthObserver); health-sync writes the instance's checks'
// status under catalog.AgentChecksStatusKey, which only the agent of the
// instance the task runs on may write. What it writes is Report, a pure
// function: "<task>/<container>" is that container's health, any other
// check the task's own (passing while it runs), each judged by
// catalog.CheckStatusOf, and every check critical once the task is
// stopping.
//
// # Design decisions
//
//   - Batches, not a write per check per change. Changes are gathered for
//     an interval (DefaultInterval, one second) from the first change of
//     a quiet spell, then every changed instance of the agent goes in one
//     WriteStatuses (one Raft entry). A check that flaps costs one write
//     per interval for the whole agent; a health that did not change (same
//     status and output) is not written at all, and a change of outputs
//     alone (a probe that answers with the time) at most every
//     DefaultOutputInterval, five minutes, as Consul's
//     check_update_interval: a change of the health itself (a container
//     unknown, then unhealthy) carries the outputs with it.
//   - A stop is written at once, before the instance goes. The snapshot
//     that says a task is stopping turns every check critical without
//     waiting for the interval, so that traffic leaves it while its
//     containers drain; Poststop writes the same if it was not yet stored
//     and returns only once it is (or the instance is gone). health-sync
//     comes after mesh-init in the agent's components, so its Poststop
//     runs before mesh-init's, which removes the instance.
//   - The instance is found by its owner (the task), not by a name: a
//     ListByOwner when a task's health is first written, kept from then on
//     with what each write returns.
//   - A down agent cannot say anything: the servers' health controller
//     sets its instances' checks critical (catalog.DownVerdict), and the
//     agent's next report, newer, wins again.
package healthsync
