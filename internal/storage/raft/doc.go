// Package raft is the replicated storage.Backend: resources kept in an
// inmem.Store on every server, changed only by applying a Raft log
// (github.com/hashicorp/raft, with raft-wal as log and stable store: 64 MiB
// segment files, preallocated, fsync on every append; and file snapshots).
//
// # Write path (seed 003)
//
// A write (WriteCAS, WriteBatch, DeleteCAS) becomes one protobuf Command
// (api/storage/v1/raft.proto), one log entry. On the leader it is handed to
// raft.Apply; a follower forwards it to the leader's gRPC forwarding
// service on the leader's server-to-server port (-server-addr, never the
// public gRPC port: forwarding skips validation and ACL hooks), found
// through the replicated server registry (id → Raft and server-to-server
// address; the leader records itself on gaining leadership, the
// cluster package records the others as they join). Once committed, every
// server's FSM applies it to its store at the entry's index, which the
// store turns into the resource version: no clock, randomness or id
// generation happens in apply, so every server holds the same versions.
// The FSM's result (stored resources, or the CAS error) returns through
// raft's ApplyFuture, and across the forwarding RPC with its sentinel
// errors intact.
//
// The FSM is a raft.BatchingFSM: it applies each run of resource commands
// that raft committed together in one store transaction (inmem.Tx), each
// at its own index and with its own result, which leaves exactly the state
// and the watch events of applying them one by one. Batch boundaries
// differ between servers and between a run and a replay of the log, so
// that equivalence is what keeps the servers identical
// (TestFSMBatchesApplyAsOneByOne checks it).
//
// # Never lose, never lie
//
// A write is acknowledged only after raft reports it committed and applied.
// When nothing was done (no leader yet, raft refused the entry before
// appending it, the request never left this server), the backend waits for
// a leader and retries, for up to Tuning.HoldTimeout. When the entry may
// have been committed (leadership lost after it entered the log, the
// connection broke after the request was sent, the caller gave up), the
// error wraps storage.ErrUnavailable and ErrOutcomeUnknown: retryable,
// but the caller should read before repeating a non-idempotent write.
//
// # Reads and watches
//
// Eventual reads, ListByOwner and watches are served by the local store,
// once the server has caught up with a leader since it started: a
// restarted server's store holds the past until it has replayed the log,
// so until then they wait, then fail Unavailable (catchup.go, which also
// judges the server's health).
// Strong reads are served by the leader: after gaining leadership it
// applies a barrier (everything committed in earlier terms is then
// applied) and only then counts as ready; each strong read checks it is
// still the leader of that same term (VerifyLeader). Followers forward
// strong reads, except of sealed types (Config.Sealed: the CA's keys),
// which the forwarding service never returns: a follower reads those from
// its own store once it has applied the leader's read index (sealed.go).
// Since every server applies the same log at the same
// indexes, a watch resumes on any server from the index it last saw: a
// lagging server first waits until it has that index committed, and skips
// the changes up to it that its store applies later; an index no server
// issued is refused with storage.ErrIndexTooOld.
//
// # Snapshots
//
// FSM snapshots are streams of length-delimited protobuf records, written
// while iterating an MVCC snapshot of the store and read record by record,
// so neither side holds an encoded copy of the state. A user snapshot
// (trellis snapshot save) is the same stream, gzipped behind a magic line;
// a user restore checks the whole file first, then, with writes held back,
// goes through raft's user-restore, which replaces the state on every
// server and leaves a gap in the index so no watch resumes across it.
//
// # Leadership
//
// LeaderCh subscriptions report true once the leader has caught up (so
// controllers start on a complete store) and false as soon as it is lost;
// a slow subscriber never misses a loss.
package raft
