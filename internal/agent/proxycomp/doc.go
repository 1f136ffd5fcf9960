// Package proxycomp is the agent's proxy component: for each mesh task it
// runs, it keeps the task's proxy snapshot (internal/proxy/snapshot) up to
// date and serves it to the task's proxy over ProxyService
// (api/proxy/v1) on a Unix socket in the task's directory,
// <task dir>/proxy.sock.
//
// The snapshot's inputs come from the agent's informer (the upstreams'
// ServiceInstances and Services, the Intentions of the task's service,
// MeshConfig, the CA roots) and from its leaf cache (the leaf of the
// task's service). A change computes again the snapshots it concerns
// (an instance: its service's callers'; intentions: its destination's
// tasks'; a root or MeshConfig: every one; a transparent task's: every
// instance and Service); an equal version is not sent again.
//
// Design decisions:
//
//   - One gRPC server per socket, per task: the socket is the proxy's
//     identity, and a server answers only its own task (Watch for any
//     other task id: PermissionDenied).
//   - The socket is owned by the proxy's user and group (1337) with mode
//     0660: the proxy, which runs as 1337, reaches it, and no other user
//     of the host does (root aside). An agent that is not root cannot
//     run a proxy as 1337: its sockets stay its own, mode 0600.
//   - Nothing is computed before every followed type has been listed
//     whole: a proxy never gets a snapshot of a half-read cache (a
//     missing MeshConfig would deny every caller).
//   - A Watch sends the current snapshot at once, then the newest one
//     each time the version changes: a burst of changes while a send is
//     under way is one send.
//   - An agent restart: the task manager gives a resumed task's health to
//     the component (component.HealthObserver), which serves the task's
//     socket again (the old socket file is removed first). The proxy keeps
//     its last snapshot while the agent is away and reconnects.
package proxycomp
