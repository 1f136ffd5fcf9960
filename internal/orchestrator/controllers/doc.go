// Package controllers holds the server-side controllers of the
// orchestrator, which run on the leader (controller.Manager):
//
//   - The instance controller marks down the instances whose heartbeats
//     stopped. For every Instance that is ready or draining it asks the
//     heartbeat Tracker for a verdict: alive, it runs again at the
//     instance's deadline; expired (no heartbeat for a TTL), it writes the
//     Instance down (status "down", down_since now, drain untouched) as a
//     compare-and-swap on the version judged. It never writes an instance
//     back to ready: the agent does that by registering again (see package
//     heartbeat for the agent's contract).
//   - The task controller marks LOST every live task (not STOPPED, not
//     LOST) of an instance that is down, has left or is not stored, with
//     the reason ("instance web-3 down: no heartbeat for 10s"), in one
//     WriteBatch per instance (each member a compare-and-swap). It finds
//     an instance's tasks in the controllers' cache
//     (orchestrator.LiveTasksByInstance) and reads each candidate from the
//     store before deciding. It runs when an instance changes, when a
//     live task changes while the cache has its instance not ready nor
//     draining, and every TaskResync for every instance and task in the
//     store: a full reconciliation that repairs what a missed event or a
//     leader that died between the two writes left behind. Ended tasks
//     are kept whatever became of their instance; the scheduler cleans
//     them up.
//
// Together: a dead instance is down within TTL plus the time of one
// write after its last heartbeat, and its tasks LOST the moment the task
// controller sees it down. The servers never revive a LOST task; its agent
// does, when it comes back still running it and the task is still wanted
// (it reports it RUNNING again; see internal/agent).
//
// The decisions are pure functions over plain values: heartbeat.JudgeLate
// (expired or not) and PlanLost (which tasks have lost their instance),
// both tested by tables. The reconcilers read, decide and write.
package controllers
