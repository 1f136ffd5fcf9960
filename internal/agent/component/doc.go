// Package component is the seam between the agent and the parts that work
// beside its tasks: mesh-init, health-sync, the sidecar proxy. It is to
// the agent what internal/module is to the server. A Component has a
// long-lived part (Start) and two per-task hooks the task manager runs at
// fixed points of every task's life, on this instance:
//
//	network namespace set up
//	  → Prestart of each component, in the agent's order
//	  → the task's runner: its containers start, run and exit
//	  → Poststop of each component whose Prestart was called, in reverse
//	network namespace torn down → the task reported STOPPED
//
// A component that must follow its tasks' health (health-sync) also
// implements HealthObserver: the task manager gives it each change of a
// task's TaskHealth between its Prestart and its Poststop, on the
// runner's report path, so it only keeps the value and writes from Start.
//
// The agent composes its components in one list (agent.DefaultComponents,
// or agent.Config.Components), each made by a Maker from Deps: what a
// component may use of the agent, never the agent itself.
//
// Design decisions:
//
//   - Progress is kept in the task's record on disk (the task manager's
//     local state), written before a hook is called and again once it has
//     returned. An agent restarted, even after a SIGKILL, calls no
//     Prestart that completed again, and calls every Poststop that was
//     due and did not complete. A hook cut short by a kill is called
//     again: hooks must be idempotent (register with a deterministic id,
//     deregister what may already be gone).
//   - A Prestart error fails the task's start: its containers never start,
//     and the task is reported STOPPED with "cannot start: prestart of
//     <component>: <error>". The Poststops of the components whose
//     Prestart was called, the failing one included, still run, so a
//     component undoes what it half did.
//   - A Poststop error is logged and the task stops anyway: a stop is not
//     held hostage to a server that cannot be reached. A component whose
//     cleanup must happen retries inside its Poststop for as long as its
//     context allows, and leaves the rest to the servers (a task's owned
//     resources go with it; a down instance's checks go critical).
//   - The STOPPED report waits for the Poststops, as it waits for the
//     network's release: whoever sees the task stopped in the store may
//     rely on its components having cleaned up after it (a replacement
//     of a daemon task starts only then).
//   - A component's Start runs for as long as the agent: started in the
//     list's order before the agent resumes its tasks (so that a resumed
//     task's due Poststop finds it running), stopped in reverse when the
//     agent stops. A Start that fails is logged; the agent runs on, and
//     its tasks with it.
package component
