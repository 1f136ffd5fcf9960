// Package snapshot computes a mesh task's proxy snapshot
// (api/proxy/v1 Snapshot) from what the agent watches for it: one pure
// function, Compute, over plain values. The agent's proxy component
// (internal/agent/proxycomp) serves its result to the task's proxy; the
// xDS server encodes the same result for Envoy.
//
// Design decisions:
//
//   - Endpoints are the instances of a service that are not critical by
//     the catalog's one view of health (catalog.HealthOf): passing and
//     warning instances take traffic. An instance without a proxy port is
//     not in the mesh and is left out: it cannot answer mTLS.
//   - An endpoint's address is its proxy's inbound address (address and
//     proxy port), where the caller's proxy connects; its app_address is
//     address and port, what a transparent app dials.
//   - The Service decides the protocol (the inbound's and each
//     upstream's); a service with no Service resource is tcp, as the
//     catalog's default.
//   - A transparent task may reach every mesh service it is given: the
//     destination's proxy enforces intentions, so the outbound table is
//     not pruned by them. Unknown destinations pass through unless
//     MeshConfig.transparent_proxy.mesh_destinations_only.
//   - Load balancing: least request for http and grpc upstreams (requests
//     vary in cost), round robin for tcp.
//   - Every list is in a stable order and version is a hash of the
//     snapshot's deterministic encoding, so that equal inputs give equal
//     versions and any change gives a new one.
package snapshot
