// Package inmem keeps resources in memory, in a go-memdb database, and
// publishes every change to watchers.
//
// Store is deterministic: each change is applied at an index the caller
// supplies, and the version it stores is that index. The Raft backend
// applies its log to a Store on every server with the log's indexes, so
// every server holds the same versions; Backend wraps a Store with its own
// counter for use without Raft (unit tests and the in-memory dev mode).
// Store.Update applies several changes in one go-memdb transaction (Tx),
// with the same outcome as applying them one at a time.
//
// Watchers are fed from a bounded ring of recent events, so a watch can
// resume after an index it has seen, and each watcher has a bounded buffer:
// one that falls behind is cut off with storage.ErrWatchTooSlow rather than
// slowing the writers.
package inmem
