// Package balance chooses which endpoint of an upstream a proxy connects
// to: round robin or least request over the snapshot's healthy endpoints,
// outlier ejection of an endpoint that keeps failing to connect, and the
// next endpoint to try after a connect failure.
//
// It does no I/O and reads no clock: the caller passes the time to every
// call that needs it, and reports each attempt's outcome (Connected,
// Failed, Closed). A Balancer is safe for concurrent use.
//
// # Design decisions
//
//   - Endpoints are named by their address (the peer proxy's inbound
//     address). Update replaces the set and keeps the state of the
//     addresses that stay, so a new snapshot does not forgive an ejected
//     endpoint or lose the connections counted on one.
//   - Least request counts the connections open to each endpoint (an
//     L4 proxy's request is its connection) and takes the lowest; ties go
//     round robin, so equal loads spread and tests are deterministic
//     (no random "power of two choices").
//   - An endpoint that fails Config.ConsecutiveFailures connects in a row
//     is ejected for BaseEjection × (its ejections so far + 1), at most
//     MaxEjection. The count is forgotten once the endpoint has stayed
//     in for MaxEjection. An ejection that would leave fewer endpoints in
//     than the floor (MinAvailablePercent of them, at least one) does not
//     happen: the mesh's health checks, not the proxy, remove instances
//     wholesale.
//   - Pick never returns an endpoint the caller has already tried for
//     this connection. When every endpoint not yet tried is ejected it
//     returns the one whose ejection ends first rather than nothing: a
//     connection that may succeed beats a refusal.
package balance
