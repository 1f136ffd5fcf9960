// Package lifecycle runs one task's containers through their drivers on
// the agent: it starts them in dependency order, watches their exits and
// health, restarts them by the restart policy, and stops the task in the
// order seed 000's shutdown timeline needs.
//
// # Shape
//
// Step is the whole decision, a pure function: spec, state, one Event and
// the time in; the next State, the Actions to take (start, recover, signal,
// destroy) and when to wake next out. It is tested by tables with explicit
// times. Runner is the thin shell around it: it feeds Step the driver's
// news (Started, StartFailed, Exited, Probed), stop requests and timer
// ticks, does the actions in goroutines, and reports every new State. The
// runner uses the time package's clock, so that its tests run in a
// testing/synctest bubble; jitter comes from an injected random source.
//
// State is plain, serializable data. The agent saves what Report gives it;
// after an agent restart Resume picks the task up from the saved state.
//
// # Startup
//
// A container starts once each of its depends_on conditions holds, as in
// ECS: START, the dependency has started; HEALTHY, it runs and its health
// check has passed (a container without a health check counts as healthy
// once it runs); COMPLETE, it has exited with any code; SUCCESS, it exited
// with 0. Containers with no dependency path between them start in
// parallel. Dependencies gate the first start only: a restarted container
// waits for its restart delay, not for its dependencies again.
//
// A dependency that can never hold stops the task with a reason naming
// both containers ("container app cannot start: its dependency proxy
// exited with code 1 before becoming HEALTHY (condition HEALTHY)"): one that
// exited non-zero for SUCCESS, or exited before becoming HEALTHY, and will
// not be restarted. A driver that fails to start any container stops the
// task with the driver's error ("container app failed to start: ...").
//
// The task is PENDING until every essential container has started, then
// RUNNING, then STOPPED; each container is PENDING, RUNNING or STOPPED, with
// its exit code, health, restart count and times.
//
// # Exits and restarts
//
// A container that exits is restarted by the restart policy: at most
// Attempts restarts within any Interval (zero: within the task's life),
// each Delay ± Jitter·Delay after the exit. There are two exceptions: an
// init container (one that others wait on with COMPLETE or SUCCESS) whose
// exit satisfies those waits has done its job and is neither restarted nor
// a reason to stop, even if essential; and nothing restarts while the task
// stops. When an essential container exits and is not restarted the task
// stops ("essential container app exited with code 1"); a non-essential one
// stays STOPPED. When every container has exited for good the task stops.
//
// Health is reported, never acted on: an UNHEALTHY container keeps running,
// and the scheduler decides. Health status follows ECS (see package
// health).
//
// # Stop
//
// A stop (desired STOPPED, an essential exit, a failed start or an
// unsatisfiable dependency) sends SIGTERM to every container that is not a
// sidecar, all at once. Sidecars keep running, so that the app can still
// reach the mesh through its proxy, until no other container is running;
// then they get SIGTERM. A sidecar with a DrainSignal gets it when the stop
// begins, while the others still run: the mesh proxy then refuses new
// inbound connections and finishes those it carries. A container still running StopTimeout (default
// 30 s) after its own SIGTERM gets SIGKILL. Containers that never started
// are STOPPED at once, and one whose start is in flight is signalled once it
// has started. When no container runs the task is STOPPED, and every
// container is handed to its driver's Destroy.
//
// # Resume
//
// A restarted agent resumes a task from its saved State: each running
// container's handle is recovered through its driver, and one that cannot
// be (driver.ErrGone, or any other error) counts as exited with an unknown
// code (-1), which then restarts it or stops the task as any exit would.
// Pending restarts and SIGKILL deadlines are absolute times and carry over.
// A start that was in flight when the agent died is asked again: had the
// driver started it, that container's handle was lost with the agent.
package lifecycle
