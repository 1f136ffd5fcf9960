// Package proxy is Trellis's built-in sidecar proxy: the data plane of
// the mesh. A Proxy holds the current snapshot (api/proxy/v1), which the
// agent streams to it and Update swaps in whole, and serves from it: the
// inbound listener (mTLS with the task's leaf, the peer's SPIFFE id, then
// the intentions decided by mesh.Decide, per connection and, for http and
// grpc services, per request), the explicit upstreams and the transparent
// outbound listener, and the admin port. TLS material is read from the
// snapshot at each handshake, so a renewed leaf or a rotated root applies
// to the next handshake without touching established connections.
package proxy
