// Package catalog is the service catalog: which services a namespace
// has (catalog/v1/Service), where their instances listen
// (catalog/v1/ServiceInstance) and how healthy each is. It holds the
// types, their validation and defaults, the index of instances by service
// of the controllers' cache, and the pure decisions over them: an
// instance's health as every reader sees it (HealthOf, MergeHealth), the
// expiry of TTL checks (ExpireTTLChecks), the servers' verdict on an
// instance whose agent is down (DownVerdict) and the one mapping of a task's
// health onto a check's status (CheckStatusOf). The module that serves
// them is catalogmodule; docs/catalog.md is the user's view.
//
// # Design decisions
//
//   - Health is status, never data. A ServiceInstance's data says what
//     checks it has; their status is under two status keys with one owner
//     each (resource.StatusOwner): "agent", written only by the agent of
//     the instance (machine) the task runs on, and "catalog-health",
//     written only by the servers (the health controller, and the
//     catalog's operations acting as it). A generic write of the data
//     cannot touch them, a generic WriteStatus or the HTTP API is refused,
//     and another instance's agent is refused: nobody forges a service's
//     health. An instance registered from outside Trellis runs on no
//     instance, so no agent may write its "agent" key; its TTL checks are
//     the servers'.
//   - Who writes never moves: the service, instance and task of a
//     ServiceInstance are fixed once written (ValidateServiceInstanceUpdate),
//     and an instance of a task is owned by that task, deleted with it. It
//     is created only on the instance its task runs on: the resource service
//     reads the task and asks ValidateServiceInstanceOwner (the type's
//     ValidateOwner hook), so no agent can register an instance of another
//     machine's task and then report its checks.
//   - Two reports, one view. MergeHealth takes the newer of the two keys
//     (a tie to the servers, whose verdict on a down agent names the report
//     it was made over) and gives one check per definition: a check nobody
//     reported is critical, as Consul registers a check, so that an
//     instance gets no traffic before its health is known.
//   - A down agent cannot say that its tasks stopped, so the servers say
//     it for it: while the Instance an instance runs on is marked down,
//     the health controller writes every check critical under its own
//     key, stamped with the time of the agent's report it overrides; the
//     agent's next report is newer and wins by itself, and a verdict still
//     standing when the agent registers again is withdrawn (DownVerdict).
//     InstancesByInstance finds the instances of one Instance.
//   - One health vocabulary. The orchestrator judges a task and a
//     container as healthy, unhealthy or unknown (orchestrator.TaskHealth,
//     orchestrator.ContainerHealth) over what agents report (HEALTHY,
//     UNHEALTHY, UNKNOWN); CheckStatusOf maps that judgement onto Consul's
//     passing / warning / critical, which the catalog, DNS and the
//     Consul-shaped API speak. Only healthy passes.
package catalog
