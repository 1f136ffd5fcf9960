// Package test holds Trellis's multi-process tests: they build the trellis
// binary, start real servers and agents on loopback, and drive them through
// the CLI and the public HTTP API only, as a user or an outside check would,
// looking at the processes and containers they run from outside. The attack
// tests (trust_attack_test.go) speak the wire as an attacker would instead:
// gRPC and TLS on every port, with certificates they forge themselves.
//
// The trellis binary is built once for the whole run (trellisBinary). The
// cluster tests whose waits are for a leader, a signature or a replicated
// write, each bounded by a minute or more (the CA's, the linearizability
// check's, TLS's, the trust attacks'), run in parallel, each on its own
// random ports and temp dirs: they spend most of their time waiting on
// elections and on the processes they start, so together they take little
// more than the longest of them. The others run alone, before them: the
// tests with a 2-second heartbeat TTL (the orchestrator's, the scheduler's
// faults, the bridge task's) check that a live agent keeps its session
// across a server restart, which a machine loaded with other clusters
// could make miss a TTL, and make the test process the reaper of orphans,
// which is process-wide; trellis dev's tests count what is left on the
// host and in the Docker engine.
package test
