// Package agent is `trellis agent`: the process on each instance that
// registers its Instance, heartbeats to the servers, learns the tasks
// placed on it, runs them through a TaskRunner, reports what happens to
// them, serves its tasks their own metadata (the metadata endpoint, one
// task's by its secret token, nothing else), serves its control API
// (leave, self, leaves, logs) on a Unix socket of mode 0600 (control.go),
// and answers the servers' reads of its tasks' logs over a link it keeps
// with the server it is on (logs.go, package tasklogs).
//
// It assembles two parts that know nothing of each other:
//
//   - session (internal/agent/session) talks to the servers: it registers
//     the Instance, heartbeats, watches the instance's tasks, writes the
//     reports, and fails over from one server to the next.
//   - tasks (internal/agent/tasks) is the task manager: it decides what
//     to do about each task, runs it through its runner, keeps its state
//     on disk, resumes it after a restart, and builds its reports.
//
// Beside them are the agent's components (package component, made from
// Config.Components, DefaultComponents in assemble.go): each has a
// Start(ctx) that runs as long as the agent, and per-task hooks the task
// manager calls around every task's runner (Prestart after its namespace
// exists and before its first container, Poststop after its last has
// exited), their progress kept in the task's record. They reach the
// servers over the session (Session.Call) and nothing else of the agent.
//
// The session hands the task manager what the servers say (session.Tasks:
// tasks, listings, definitions) and takes its reports back; the task
// manager reads task definitions through the session it is attached to.
// Between them go plain values and funcs: protobuf resources in, reports
// out. The agent joins them (taskSink), probes the host's facts for the
// registration, and serves the local API over the task manager's views.
//
// Ending the agent's context detaches it from its tasks and leaves them
// running (an agent upgrade or restart must not stop the workload); Leave
// stops them, waits for their STOPPED reports, and marks the instance
// left.
package agent
