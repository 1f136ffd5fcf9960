// Package tasks is the agent's task manager: which of the tasks placed on
// the instance to run, stop or report, their runners, their local state on
// disk, and resuming them after the agent restarts. It talks to no server:
// a session (internal/agent/session) hands it what the store says of the
// tasks (Observe, ObserveListing, LearnDefinition), takes its reports
// (Reports, Written), and is attached (Attach) to read the definitions
// of the tasks it starts. It is tested without a server.
//
// # Tasks
//
// A task is keyed by its uid: a task deleted and re-created under the same
// name is a new task. What to do with a task is decided by decide, a pure
// function of what the store says (desired and last status) and of where
// the agent is with it (idle, starting, running, stopping, done). The
// agent never starts a task twice: a task it does not run but that the
// store says is running or lost (the agent lost its data dir, say) is
// reported STOPPED, never restarted; the scheduler replaces it. A fresh
// listing of the instance's tasks is acted on only once it is whole
// (ObserveListing takes it in whole): a replacement then always knows of
// the task it replaces, whatever order the listing came in.
//
// # Reports
//
// The agent owns a task's status["agent"] (orchestrator.TaskStatusKey), a
// TaskStatus: last_status, containers, health, timestamps, stop_reason,
// session and reported_at. Whoever placed the task owns its data
// (desired_status above all), which a report never touches. Runner
// snapshots mark a task dirty; Reports builds a status write of each,
// a CAS on the version last seen, STOPPED reports first, and holds back a
// replacement's report until the STOPPED report of the task it replaced
// is stored, or goes in the same batch ahead of it (Report.After): the
// store never shows the two running.
//
// # Components' hooks
//
// A task's life here is one sequence (run.go's run): its network
// namespace, the Prestart of each of the agent's components (Config.Hooks,
// in order), its runner, then, once the runner has returned, the Poststop
// of each component whose Prestart was called (in reverse), the
// namespace's teardown, and the STOPPED report, held back until then.
// hooks.go records each hook's progress in the task's record, so that a
// restarted agent calls no completed Prestart again and every due
// Poststop once; a Prestart's error fails the start (see package
// component).
//
// # Local state
//
// For each task it runs, the manager keeps a JSON file in its data dir
// (written atomically): the task's id and uid, its definition, its
// metadata token, its last snapshot with the runner's own state, and any
// stop in progress. A restarted agent — even one killed with SIGKILL —
// resumes these tasks through TaskRunner.Run with the saved state instead
// of starting them again, and reports what happened while it was away. A
// task's file is removed once the store shows the STOPPED report.
package tasks
