// Package controller is the controller runtime: every behaviour of Trellis
// (today the daemon scheduler, the instance and task controllers of the
// orchestrator and the owner reaper) is a controller that watches
// resources and converges the world onto them.
//
// A Controller declares its managed type, the types it watches with a
// Mapper from a change to the requests it calls for, and a Reconciler; the
// reconcile contract (level-triggered, idempotent, what an error, a
// RequeueAfter and a Terminal error mean) is written on Reconciler.
//
// Design decisions:
//
//   - Leader only. The Manager follows storage.Leadership: it starts every
//     controller on gaining leadership and stops them, waiting for the
//     reconciles in flight, on losing it. All progress is kept in resources,
//     so a new leader needs no hand-over: its watches open with a full list
//     and every resource is reconciled once.
//   - One watch per type, shared. The Manager opens one watch per watched
//     type for all controllers (an informer), which remembers the id, owner
//     and version of what it has seen, not the data (the owner reaper
//     follows every type; a full copy would double the leader's memory).
//     That record makes a broken watch lossless: the informer resumes after
//     the last index it has wholly seen, and when the service cannot resume
//     from there it lists again and hands on the difference with its
//     record, deletions included.
//   - Mappers are pure. A Mapper runs on the watch's path and does no I/O;
//     references between resources are looked up in a reverse index the
//     Manager keeps from Controller.References (MapReferencing), and
//     anything else in the Cache.
//   - An opt-in decoded cache with named indexes (Cache). A controller
//     declares in Controller.Cached the types it reads and the indexes it
//     looks them up by (every type has one by owner); the Manager's
//     informer of such a type keeps its resources, data decoded once and
//     shared read-only by every reader, and applies each event to the
//     cache before any mapper sees it, so that a reconcile sees at least
//     the change that caused it. A controller's workers start once its
//     cached types are listed whole. Only declared types are kept (a
//     decoded task costs about 1.5 KB beside its 0.85 KB resource;
//     BenchmarkCacheMemory). Reads hand out shared slices, kept sorted
//     between reads until a change: finding one instance's tasks among
//     5,000 takes well under a microsecond, against about 30 ms listing
//     and decoding them from the store (BenchmarkCacheLookup), and reading
//     an environment's 5,000 tasks after one of them reported copies the
//     last read and puts the changed task in its place, about 0.05 ms
//     (0.2 ms as a pass over the kept order; BenchmarkCacheReadAfterReport;
//     both on a loaded 2-core machine). A controller may declare too a
//     value the cache derives from each object as it applies it
//     (Derived: the scheduler's view of a task), and read a type's
//     Revision to keep what it works out from a whole type until the type
//     changes: what a controller derives from the cache is the runtime's
//     to keep, never its mappers'.
//     The cache is the leader's, like everything here: the assignments
//     hub, which serves agents on every server, keeps its own index in a
//     fan-out (internal/fanout).
//   - One queue per controller, with the rules of a Kubernetes work queue:
//     dedupe of queued requests, never one request on two workers, changes
//     during a run queue it again, per-request exponential backoff with
//     jitter that success resets. A panic in Reconcile is recovered and
//     treated as an error. Delays use the time package's timers, so tests
//     run them in a testing/synctest bubble instead of an injected clock;
//     the backoff itself is a pure function tested by tables, in the
//     backoff package that every retry loop of Trellis shares.
//   - Pacing per request, when a controller asks for it (Pacing): each
//     run costs its request its time plus Factor×w for its work w, which
//     elapsed time pays back, and a request runs only while it owes at
//     most Burst, so
//     that a stream of changes to one heavy resource cannot keep the
//     leader's CPU busy, while a change that comes alone runs at once; the
//     changes that arrive while a request is held are all handled by its
//     next run, and no hold lasts more than Max. The runtime measures the
//     work, less what the reconciler marked as waiting (Waiting: its
//     commits, which cost no CPU), and holds the request in the queue, so
//     a held request takes no worker and a RequeueAfter or retry is kept,
//     not replaced. The daemon scheduler uses it (Factor 2, Max and Burst
//     250 ms; see bench/README.md for the rollouts of 5,000 instances that
//     called for it).
//   - A periodic resync lists every watched type from the store (not from
//     the informers' record) and maps it as if just written: it repairs
//     whatever a bug or an outage let slip.
//   - Stopping waits for every reconcile in flight, without a deadline:
//     that wait is what keeps the reconciles of an old and a new leader
//     apart. A reconcile that ignores its context is named in the log
//     every 30 seconds until it returns.
package controller
