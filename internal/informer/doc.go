// Package informer keeps, for the consumers of one process, an indexed
// local cache of the resources of the types they follow, fed by one watch
// per type, and hands every consumer the changes as deltas: added, changed
// or removed, with the object before and after. It serves both sides of
// the cluster: an agent's informer follows the servers over its session
// link (one watch per type, shared by every component), and a server's
// follows its own store, so that routes which read the catalog answer on
// followers as well as on the leader.
//
// Design decisions:
//
//   - The cache is the controller runtime's (controller.Cache): objects
//     decoded once, declared indexes (controller.Index) and derived values,
//     objects and slices shared by every reader and never modified. An
//     informer adds to it what the runtime's leader-only watches do not
//     need: the object before a change, so that a consumer gets deltas
//     instead of a whole set (resource.WatchedSet) or an id to reconcile.
//   - One goroutine per type applies the watch's events to the cache and
//     calls the type's subscribers, in the store's order, under the type's
//     lock. A subscriber that joins late is first handed what the cache
//     holds, as additions, under that same lock: it neither misses nor
//     doubles a change. Subscribers must be quick (hand the delta to a
//     queue of their own): a slow one holds up every consumer of the type.
//   - A watch that breaks is opened again after the last index whose
//     changes the informer has wholly seen (an event at index i proves
//     every change before i; an END_OF_SNAPSHOT, or a server's progress
//     mark, every change up to its index). The changes of that index that
//     come again are repeats, which the cache recognises by version and
//     the subscribers never see. Only when the source can no longer resume
//     from there (resource.NeedsRelist) does the informer list again and
//     compare the new list with the cache: what is gone is handed on as
//     removed, what is new or newer as added or changed. A change is then
//     never lost, only collapsed to its latest state. A listing older than
//     what the informer holds (a lagging server the agent's link moved to)
//     is refused whole, and the informer tries again until a server has
//     caught up: it never steps back in time (resource.ErrStaleListing).
//   - Reads may be bounded by an index (WaitIndex): a caller that must see
//     a write (its own, or one another server acknowledged) waits until the
//     informer has applied every change up to the write's index. A
//     server's informer asks its store for progress marks, so that its
//     index follows the store's even while its types do not change; with
//     Config.ReadIndex (the leader's read index, on a Raft server) a read
//     can be made consistent, as Consul's ?consistent is: WaitConsistent.
//     Without a bound a read is the cache as it is (Consul's stale mode),
//     which on a server the store itself holds back until the server has
//     caught up with a leader once since its start. ParseQuery and Await
//     are the whole of it for a route: Consul's ?index= and ?wait= (a
//     blocking query, its wait capped at 10 minutes as Consul caps it),
//     ?consistent and ?stale, and the index to answer with
//     (X-Consul-Index: the type's last change).
package informer
