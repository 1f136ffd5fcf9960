// Package assignments tells each agent about the tasks placed on its
// instance, from one shared watch per server.
//
// Agents could each watch every Task and keep their own; with N instances
// and a deployment of one task per instance that is N watchers each sent
// N tasks and their reports: measured, 2,000 simulated instances took 75 s
// and 54 s of server CPU to see 2,000 tasks run. The Hub is instead a
// fan-out (internal/fanout) of one WatchList of the tasks, keyed by
// data.instance: each subscriber gets only its own instance's tasks, a
// snapshot taken atomically with the subscription, then every change in
// order, but for the agent's own reports (orchestrator.IsAgentReport): the
// agent has those from its writes, and echoing them would double what
// every agent receives. What is the tasks' own stays here: the key, the
// reports kept back, and the task definitions a stream carries.
//
// The hub keeps its own index (the fan-out's) rather than reading the
// controllers' cache (controller.Cache): that cache is fed by the
// controller manager's watches, which run on the leader only, while every
// server serves agents; and a subscription needs what the cache does not
// give, a snapshot of one key taken under the same lock as the deltas
// that follow it, the store's index with progress marks (for min_index),
// and the previous version of each task (to keep the agent's own reports
// back). A cache that ran on every server and gave all that would be the
// fan-out again.
//
// A subscriber that falls behind, and every subscriber when the hub's own
// watch must start over, is ended with OutOfRange: it opens a new stream.
//
// A new stream resumes (resume.go): the agent names what it holds (each
// task's uid and version, the definitions it has), and the stream starts
// with only the difference between that and the fan-out's snapshot of its
// instance (fanout.Difference), then an END_OF_SNAPSHOT marked resumed.
// At 5,000 instances, agents that lost their streams each took a whole
// snapshot and every definition again on reconnecting, which was load
// that made more of them fall behind; a snapshot of one instance's tasks
// is small, but 5,000 of them at once, each decoded by its agent, are
// not. The difference is computed from the snapshot alone, not replayed
// from a history, so any server resumes any agent, and it is exact
// whatever happened meanwhile: the agent holds what a fresh snapshot
// shows (the property test, TestResumedStreamEqualsAFreshSnapshot). A
// request without resume (an older agent, or one that holds nothing it
// can vouch for) gets the whole snapshot, unmarked. Both are counted
// (trellis_watch_tasks_streams_total{start}, and the events resuming
// saved).
package assignments
