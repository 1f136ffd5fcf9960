// Package agent is `trellis agent`: the process on each instance that
// registers its Instance, heartbeats to the servers, learns the tasks
// placed on it by watching them, runs them through a TaskRunner, reports
// what happens to them, and serves a small local HTTP API to its tasks and
// to the CLI.
//
// # Servers
//
// The agent holds one gRPC connection at a time. It tries its servers in
// turn; when the one it uses goes away (a heartbeat, the watch or a report
// fails), it closes the connection and tries the next one after an
// exponential backoff with jitter. Everything it holds about tasks lives
// outside the connection, so a failover loses nothing: the next server's
// task stream starts with a fresh listing of the instance's tasks, never
// older than the newest view the agent has taken in (it sends that index
// as min_index, and refuses a listing older than it), and unwritten
// reports are written on the next connection.
//
// # Registration and heartbeats
//
// Each process start makes a new session id. The agent writes its Instance
// by read-modify-write with CAS: it sets the built-in attributes (os, arch,
// hostname, cpu.count, memory.bytes, kernel, driver.<name>) and those of
// its -attribute flags, and keeps everything else an operator set, the
// drain flag included. It heartbeats every third of the TTL the servers
// return, with jitter, on one heartbeat stream per connection
// (AgentService.HeartbeatStream); a FailedPrecondition answer means the
// servers no longer know this session (they marked the instance down and
// its tasks lost, say), so the agent registers again with a new session
// and reports its tasks again, which re-adopts them.
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
// listing of the instance's tasks (every new stream starts with one) is
// acted on only once it is whole: a replacement then always knows of the
// task it replaces, whatever order the listing came in.
//
// # Reports
//
// The agent owns a task's last_status, containers, health, timestamps,
// stop_reason, session and reported_at; whoever placed it owns the rest
// (desired_status above all). Runner snapshots mark a task dirty; the
// reporter writes every dirty task in one WriteBatch shortly after the
// first change (ReportDelay), each member a CAS on the version last seen.
// A conflict re-reads the members and merges the agent's fields into what
// is stored, never the other way round.
//
// # Local state
//
// For each task it runs, the agent keeps a JSON file in its data dir
// (written atomically): the task's id and uid, its definition, its
// metadata token, its last snapshot with the runner's own state, and any
// stop in progress. A restarted agent — even one killed with SIGKILL —
// resumes these tasks through TaskRunner.Run with the saved state instead
// of starting them again, and reports what happened while it was away. A
// task's file is removed once the store shows the STOPPED report.
//
// Ending the agent's context detaches it from its tasks and leaves them
// running (an agent upgrade or restart must not stop the workload); Leave
// stops them and marks the instance left.
package agent
