// Package meshinit is the agent's mesh-init component (seed 000's
// mesh-init container): for a task whose definition has a mesh block, it
// registers the task's catalog/v1/ServiceInstance, and creates its
// catalog/v1/Service when there is none, before the task's first
// container starts (Prestart); it removes the instance once the task's
// last container has exited (Poststop). The Service stays: other
// instances may be of it.
//
// What is registered is a pure function of the task, its network and the
// instance (Plan); the component is the thin shell that writes it through
// the agent's link to the servers.
//
// Design decisions:
//
//   - One instance per task, named after the task and owned by it: a
//     deterministic id, so a Prestart called again (retried, or after the
//     agent was killed in it) finds what it registered instead of adding
//     a second, and the servers delete the instance with its task should
//     the agent never come back to run Poststop.
//   - Create-only writes (resource.CreateOnly): a Prestart that finds the
//     instance registered by this task writes nothing, or, when the task's
//     address has changed, updates it with a compare-and-swap on the
//     version it read. An instance of the same name owned by another task
//     (an earlier task of that name, not yet deleted with it) refuses the
//     start rather than take it over.
//   - The Service is created only when absent, with the mesh block's
//     protocol; an existing Service is the operator's or another task's,
//     and is left as it is.
//   - Poststop deletes the instance with a compare-and-swap on the version
//     it read, and only when it is this task's (its owner's uid): what is
//     gone already is not an error. The checks go critical before that:
//     health-sync, the next component, has its Poststop run first (the
//     agent runs Poststops in reverse order).
//   - The servers hold the rules: an instance of a task must be on the
//     instance (machine) the task runs on (catalog.ValidateServiceInstanceOwner),
//     only that instance's agent may write or delete it among agents
//     (resource.Registration.AgentWritten), and only it reports its checks.
package meshinit
