// Package storage defines the contract between the resource service and the
// place resources are kept (seed 003's "storage backend").
//
// A Backend stores whole resources keyed by (type, namespace, name). It knows
// nothing of validation, ownership rules or ACLs: those live in the resource
// service above it. Its one rule of consistency is compare-and-swap on the
// version: a write or delete that carries a version succeeds only when the
// stored resource still has that version, and a write with an empty version
// succeeds only when nothing is stored under that name. The backend assigns
// the new version itself, so every write of a resource, status writes
// included, produces a version no earlier write had. Versions are the
// store's write indexes in decimal, so one written later has a larger
// number; the compares of a batch (pbresource.Compare) rely on it.
//
// A batch may carry members that only compare, as etcd's Txn does: a
// resource must still be at a version, a name must be free, a resource
// must exist, nothing of a type in a namespace may have been written since
// a version. They are checked in the same atomic step as the batch's
// writes, against the state before them, so a check and the write it
// guards cannot be split by another write.
//
// Two implementations exist: inmem (a go-memdb store, used in unit tests and
// the in-memory dev mode, and as the state machine the Raft backend applies
// its log to) and raft (replicated; writes and strong reads on a follower
// are forwarded to the leader). The storagetest package runs one
// conformance suite against both.
//
// Resources returned by a Backend are shared with the store and must be
// treated as read-only; clone before changing one.
package storage
