// Package health runs a container's health check and turns its results
// into a health status, with the semantics of ECS container health checks.
//
// A Check is one of three probes: a command run inside the container
// (through the driver's Exec; exit 0 passes), an HTTP GET (a 2xx or 3xx
// answer passes; redirects are not followed) or a TCP connect (an accepted
// connection passes). Every probe is bounded by the check's Timeout; a probe
// that runs out of time fails.
//
// The package keeps the bookkeeping apart from the probing:
//
//   - Tracker is a plain value that Record folds each result into: a
//     container starts UNKNOWN; a pass makes it HEALTHY and clears the
//     failure count; Retries consecutive failures make it UNHEALTHY (a
//     healthy container stays HEALTHY until then). Failures before the end
//     of StartPeriod are not counted unless a check has already passed: the
//     first pass ends the grace period early. Tracker is serializable, so a
//     restarted agent keeps counting where it stopped.
//   - Prober does the I/O of one probe, and Run calls it on the check's
//     schedule: every Interval, and every StartInterval (1 s by default)
//     while the container is in its start period and no probe has passed,
//     so that a container others wait on becomes HEALTHY soon after it is
//     ready. Those quick probes cannot make it UNHEALTHY, since failures in
//     the start period are not counted.
//
// An unhealthy container is only reported here; what to do about it is the
// scheduler's decision.
package health
