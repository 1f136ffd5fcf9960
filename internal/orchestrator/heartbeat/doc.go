// Package heartbeat is how the servers know which instances are alive:
// AgentService.Heartbeat, which agents call (Service), and the Tracker that
// keeps, on the leader only and in memory only, when each instance was
// last heard from.
//
// Design decisions:
//
//   - Heartbeats never touch the store. 5,000 instances heartbeating every
//     few seconds would be thousands of Raft entries a second; what they
//     say (this agent is still there) matters only to the leader, and only
//     until the next one. A follower forwards a heartbeat to the leader
//     over gRPC, once (a forwarded heartbeat is never forwarded again).
//   - A follower forwards heartbeats in batches (forwarder.go): those that
//     arrive within a short window (DefaultForwardWindow, 20 ms) go to the
//     leader in one ForwardHeartbeats call, which answers each with the
//     whole status it would have answered alone, so agents see the same
//     codes and reasons through any server. Thousands of agents cost the
//     leader tens of calls a second instead of one per heartbeat; a
//     heartbeat, sent every TTL/3, can spare the window.
//   - A new leader starts empty and gives every instance that the store
//     calls ready or draining a whole TTL from the moment it first looks at
//     it, and at least FailoverTTL (3 TTLs) from its takeover (Nomad gives
//     5 minutes after an election): a leader change never marks a live
//     instance down, it only delays marking a dead one.
//   - The servers' lateness is not the agents' absence (lateness.go): a
//     heartbeat counts from when a server first had it, and an instance's
//     deadline grows by the time the leader could not run or by how late
//     the fleet's heartbeats are as a whole.
//   - Only the instance controller (internal/orchestrator/controllers) puts
//     instances into the Tracker (Tracker.Observe), from what it read in the
//     store, and only it marks them down. A heartbeat only extends an
//     instance already observed with the same session; one the Tracker has
//     not observed yet is judged from the store (Admit) and changes
//     nothing. So a heartbeat racing with a change of the Instance cannot
//     keep alive what the controller is marking down.
//   - The timer is the controller's: a verdict that an instance is alive
//     comes with its deadline, and the controller runs again then
//     (controller.RequeueAfter). The Tracker reads an injected Clock, so
//     verdicts are tested with explicit times; JudgeLate, FleetLateness and
//     Admit are the pure decisions, tested by tables.
//
// # The agent's contract
//
// Registering. Before it heartbeats, an agent registers its Instance
// (orchestrator/v1/Instance, named by the agent's -name) in one call,
// AgentService.Register, whose AgentRegistration the server writes to
// the Instance's status["agent"] (creating the Instance when there is
// none), with
//
//   - session: a new random id, different for every registration (each
//     start of the agent, and each registration after a refusal below);
//   - registered_at: now;
//   - left: false (true only when it leaves).
//
// The Instance's data (drain, the attributes the operator set) is not the
// agent's; the server keeps it as stored.
//
// Heartbeating. Right after registering, and then every TTL/3 with some
// jitter, the agent calls AgentService.Heartbeat{instance, session} on any
// server. The response carries the TTL (the server's -heartbeat-ttl,
// default 10 s) and the gRPC address of the leader that took it: sending
// the next heartbeats there saves a forwarding hop, and any other server
// will do when the leader stops answering.
//
// Errors, and what to do:
//
//   - OK: the instance is alive until TTL after this heartbeat.
//   - Unavailable (no leader yet, the leader unreachable, a server shutting
//     down): retry soon, on another server if one fails. A slow answer is
//     not a failure: keep the stream and the server (the late answer
//     counts), and move only after a whole TTL without one. Do not register again: nothing is wrong with the instance. A
//     new leader gives every live instance a whole TTL from when it takes
//     over, so an agent that keeps retrying is not marked down by an
//     election. During an election a server holds the heartbeat (up to
//     5 s, or the call's deadline) and answers it once a leader takes it,
//     so Unavailable comes only after that wait, or from a server that
//     cannot forward at all.
//   - NotFound, reason NOT_REGISTERED: no Instance of that name is stored
//     (it was removed). Register, then heartbeat.
//   - FailedPrecondition, reason INSTANCE_DOWN: the servers heard nothing
//     for a TTL and marked the instance down (or are marking it), and its
//     live tasks LOST. A heartbeat does not bring it back: register again
//     (a new session), then heartbeat. Until then, tasks the agent reports
//     on a down instance are marked LOST again.
//   - FailedPrecondition, reason INSTANCE_LEFT: the instance left the
//     cluster (`trellis agent leave`). An agent that wants to rejoin
//     registers again; one that is leaving stops heartbeating.
//   - FailedPrecondition, reason SESSION_MISMATCH: the stored Instance
//     names another session: another agent process registered this name
//     after this one. Register again to take it over; two agents running
//     under one name will take it from each other forever, which the
//     servers' logs show.
//   - InvalidArgument: the request is malformed (a bug in the agent).
//
// The reason is the Reason of a google.rpc.ErrorInfo detail in the domain
// ErrorDomain; ReasonOf reads it from an error.
package heartbeat
