// Package session is the agent's side of its servers: registering the
// Instance, heartbeating, watching the instance's tasks and writing what
// the task manager reports about them, over one gRPC connection at a
// time. It never looks inside a task: what the servers say goes to a
// Tasks (the task manager), and the reports come from it.
//
// # Servers
//
// The agent holds one gRPC connection at a time. It tries its servers in
// turn (Config.Failover, shared with the agent's leaf cache, which rides
// the session's connection and dials on its own only while there is none);
// when the one it uses goes away (a heartbeat, the watch or a report
// fails), it closes the connection and tries the next one after an
// exponential backoff with jitter. Everything about tasks lives in the
// task manager, outside the connection, so a failover loses nothing: the
// next server's task stream resumes from what the agent holds (below),
// never older than the newest view the agent has taken in (it sends that
// index as min_index, and refuses a listing older than it), and unwritten
// reports are written on the next connection.
//
// # Registration and heartbeats
//
// Each process start makes a new session id. The agent registers it in
// one AgentService.Register call: its registration (the built-in
// attributes os, arch, hostname, cpu.count, memory.bytes, kernel,
// driver.<name>, those of its -attribute flags, address, resources,
// drivers) goes to the Instance's status["agent"], and the data, where an
// operator's attributes and drain are, stays as the operator left it. It heartbeats every third of the TTL the servers
// return, with jitter, on one heartbeat stream per connection
// (AgentService.HeartbeatStream); a FailedPrecondition answer means the
// servers no longer know this session (they marked the instance down and
// its tasks lost, say), so the agent registers again with a new session
// and has the task manager report its tasks again, which re-adopts them.
//
// # The task stream
//
// WatchTasks starts with a listing of the instance's tasks; the listing is
// handed to the task manager only once it has ended (Tasks.ObserveListing),
// never cut short, then every change as it comes. Task definitions come
// ahead of the tasks that use them.
//
// The session keeps what it holds of the tasks (held.go): each task as the
// servers last showed it (the stream, its own reports' answers, a task
// read again) and the definitions the stream carried. Once it has taken
// in one whole listing, every new stream resumes from it
// (WatchTasksRequest.resume): the server sends only what differs, and
// marks the END_OF_SNAPSHOT resumed; the session applies that to what it
// held and hands the task manager the result, whole, as the listing a
// fresh snapshot would have been. So the task manager sees no difference
// between the two, and a reconnect costs the server and the stream only
// what changed. A start without the mark (an older server) is a whole
// listing and replaces what was held; after DataLoss the agent holds
// nothing and takes a whole snapshot.
//
// # Reports
//
// The task manager says what to write (Tasks.Reports: each task's
// status["agent"]); the reporter writes every pending report in one
// WriteStatuses shortly after the first change (ReportDelay), each member
// a CAS on the version last seen, and a report that must follow another
// (a replacement after the STOPPED report of the task it replaces) in a
// second round, only once that one is stored. A member refused as stale
// is re-read from the leader and handed to the task manager, which reports
// again over what is stored on the next round.
package session
