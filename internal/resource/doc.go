// Package resource is the generic resource service of seed 003: the type
// registry, with each type's validation, defaulting and ACL hooks, and the
// service that reads, writes, lists, deletes and watches resources of every
// registered type through one API, on top of a storage.Backend.
//
// # One service, two faces
//
// Service implements API, which in-process callers use (the HTTP API, the
// controllers), and the generated gRPC ResourceServiceServer. The unary
// RPCs are the API methods themselves; WatchList streams what Watch yields.
// The caller's token is the one ContextWithToken attached or, on the gRPC
// face, the TokenMetadataKey metadata; Config.Authorize turns it into an
// acl.Authorizer once per request. Every error is a gRPC status error:
//
//	InvalidArgument     bad input; the message names the field and the reason,
//	                    e.g. `id.name: "Foo_1" is not a valid name: ...`, or
//	                    `resources[3].id.name: ...` for a batch member
//	ResourceExhausted   a resource over MaxResourceSize, a batch over its limits
//	NotFound            nothing stored under that id
//	Aborted             a version or uid that is not the stored one (re-read and
//	                    retry), or an upsert that lost too many races
//	FailedPrecondition  the state forbids it: a namespace that does not exist,
//	                    deleting a namespace that is not empty; or the type is
//	                    written and deleted only through its domain's
//	                    operations, which the message names (operations.go)
//	PermissionDenied    an ACL hook refused
//	Unavailable         no leader, or this server has not caught up with it
//	                    (storage.ErrUnavailable); retry
//	OutOfRange          a watch must re-list: it fell behind the writers, or
//	                    its since_index is no longer kept (see NeedsRelist);
//	                    the code means nothing else anywhere in the service
//	Canceled, DeadlineExceeded   the request's context ended
//	Internal            anything else; the detail is logged, not returned
//
// # What a write goes through
//
// Nothing is written until all of this has passed, in this order: the id
// (a registered type, a lowercase DNS label name, a namespace as the type's
// Scope requires: none for cluster-scoped types, "default" when a
// namespaced type gives none), metadata (label-style keys, bounded values),
// the owner (a full id with its uid), data (an Any of the registered
// message that decodes into it), the type's Mutate hook, the checks again
// on what Mutate produced, the type's Validate hook, the size limit, the
// ACL Write hook, and the existence of the namespace. The data is then
// stored in one canonical (deterministic) encoding.
//
// Against the stored resource (planWrite, a pure function):
//
//   - create: uid is a new ULID, generation 1, no status;
//   - a uid that is not the stored one: refused (the resource was deleted
//     and re-created since the caller read it);
//   - a version that is not the stored one: refused (CAS); no version: an
//     upsert onto whatever is stored;
//   - the owner is fixed at create: a write that changes it is refused;
//   - data and metadata equal (proto.Equal) to the stored ones: nothing is
//     written and the stored resource is returned, its version unchanged.
//     Controllers rely on this to write their desired state every time
//     without looping on their own writes;
//   - otherwise generation + 1 and the stored status carried over: only
//     WriteStatus changes status.
//
// The first read of the stored resource is eventual: on a Raft follower it
// costs no round trip to the leader, and the CAS on the version it returned
// catches a stale read. A decision the CAS cannot check (a refusal, or a
// write that changes nothing) is confirmed with a strong read first. When
// the CAS fails, an upsert reads again with strong consistency and tries
// again, a bounded number of times.
//
// WriteBatch validates every member as Write does and applies all of them
// in one Backend.WriteBatch: all or none. Its reads are per member but
// eventual, so placing thousands of resources costs no round trip beyond
// the batch itself. A member identical to its stored copy is confirmed by
// a strong read and left out of the writes; when the batch writes
// anything, a compare that the member is still at the version read goes
// with it, so the whole answer is of one state. A batch may carry status
// entries too, each checked and allowed as WriteStatus would (its key's
// owner alone) and written in the same step, any refusal failing the
// batch: a controller stores a plan and the status that follows from it
// in one commit (the daemon scheduler's tasks, its deployments' progress
// and its environment's status).
//
// A batch may carry compares (pbresource.Compare, etcd's Txn compares):
// a resource is at a version, a name is free, a resource exists, nothing
// of a type in a namespace was written since a version. The backend checks
// them in the same atomic step as the writes; each is authorized as a read
// of what it looks at, and a failed one is named (compares[i], Aborted).
// A member may name as its owner another member without the owner's uid:
// the batch gives it the uid, the new one when it creates the owner.
//
// # Status
//
// Status is what the controllers and agents report, kept apart from data,
// which is the user's intent: one entry per key (its owner's name), each
// {observed_generation, conditions, data}. data is a typed payload: the
// type's Registration declares, per key, the message it takes
// (Registration.Statuses) and a hook to validate it; a payload under a key
// that declares none, or of another message, is refused ("status.data:
// ..."), and the payload is stored in canonical encoding, like data.
//
// Every declared key has one owner (StatusOwner): a controller of the
// servers, or the agent of the instance the resource is on. A write of it
// by anyone else is refused with PermissionDenied naming the owner, after
// the ACL hook and before anything is written (CheckStatusOwner, a pure
// function; who writes comes from the context, AsController and AsAgent,
// never from the request: see owners.go). Keys no type declares take
// conditions from anyone who may write the resource.
//
// WriteStatus sets one key's entry, bumps the version and never the
// generation, and changes neither data nor metadata; observed_generation
// may not exceed the generation. An identical entry is not written again.
// With a version it is a CAS. Without one it applies to whatever is stored:
// a key has one owner, who competes with nobody for it, so a concurrent
// write of the data (a user's) is no reason to fail; the service reads
// again and retries, as an upsert does. So users' writes and controllers'
// reports of one resource never make each other fail, and generation
// counts the user's changes alone.
//
// WriteStatuses applies many entries, each as WriteStatus would, in one
// Backend.WriteBatch: one Raft entry for an agent's report of a thousand
// tasks. Unlike WriteBatch it is not all or none, since what an entry
// meets in the store concerns it alone:
//
//   - bad input in any member (its id, key, conditions or payload), one
//     resource named by two members, a member over the limits, or a
//     refusal of the ACL hook or of a key's owner check fail the
//     request: nothing is written, and
//     the error names the member ("statuses[3].status.data: ...");
//   - a member whose resource is gone, whose version or uid is stale, or
//     whose observed_generation is ahead fails alone: its result carries
//     the error WriteStatus would have returned, and the others are
//     written (StatusResult reads a result as WriteStatus's answer);
//   - a storage batch that meets a concurrent write is planned again on a
//     strong read, as an upsert is: a member with a version then fails as
//     stale, one without is written. The written resources are split into
//     storage batches of at most MaxBatchSize, which changes no outcome as
//     no member depends on another.
//
// It takes at most MaxBatchMembers members and MaxBatchSize encoded bytes.
//
// # Tenancy
//
// DefaultNamespace always exists. Any other namespace must be stored as a
// core/v1/Namespace before resources are written into it (or be created
// by the same batch), and a Namespace can be deleted only when no
// registered namespaced type has resources in it. The first check goes
// with the write, as a compare that the Namespace exists, so a write never
// lands in a namespace deleted after it was checked. The second is not
// atomic with the delete: a write applied between the emptiness check and
// the delete leaves its resource in a namespace that is then gone.
//
// # ACLs
//
// Every request calls its type's ACL hooks, or DefaultACLHooks for the ones
// a type leaves nil. Read asks the hook before the store, so a refused
// caller cannot learn whether a resource exists. List and Watch call the
// List hook and then leave out each resource the Read hook refuses; this is
// how a wildcard ("*") list of a namespaced type shows only what the caller
// may read. Write, WriteBatch, WriteStatus and Delete call the Write hook.
//
// # Owners
//
// A resource may name an owner: one incarnation (uid included) of another
// resource. The service does not delete owned resources when their owner
// is deleted, and does not check that the owner exists when writing (but
// see WriteBatch: an owner may be created with what it owns). The
// controller runtime's owner reaper does that: it deletes every resource
// whose owner is no longer stored with that uid. So a resource written with
// an owner that does not exist will be reaped. A type whose data must agree
// with its owner declares Registration.ValidateOwner: then the service does
// read the owner of every resource of the type it creates (or takes it
// from the same batch), refuses the create when the owner does not exist,
// and lets the hook refuse data that disagrees. The reaper's deletes are
// FromOperations: a type deleted only through its operations is reaped
// with its owner, which only those operations could have written or
// deleted.
//
// # Watched sets
//
// WatchedSet is for code that acts on the whole current set of one type in
// one namespace, not on each change: the server's trust of the Connect
// roots, the CA signer's roots, keys and configuration, the agent's roots.
// It keeps the set, keyed by name, from a watch's snapshot on, hands it
// over after the snapshot and after every change, and opens a watch that
// ends again after a backoff (backoff.Policy, reset by a delivered
// snapshot), whose new snapshot replaces the set. Its source is a Watcher:
// the API, or a client of a server's gRPC face. Controllers use the
// controller runtime's informers instead, which resume from an index and
// keep no data; consumers of changes (the agent's components, a server's
// routes) use package informer, which keeps the data, indexed, and hands
// out deltas. Both follow their types with Follow: one watch resumed
// after the index it has wholly handed over, listed again only when it
// cannot be resumed (NeedsRelist).
//
// # Copies
//
// The backend shares its stored resources with its store. Everything the
// API returns is a copy the caller may change; the gRPC face, which only
// encodes, skips the copy for watch events.
package resource
