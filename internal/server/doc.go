// Package server assembles a Trellis server process: a storage backend
// (in memory, or Raft through package cluster), the type registry, the
// resource service over it, the gRPC API (the ResourceService, and with
// Raft the forwarding and cluster services; with a recovery interceptor,
// an authorization interceptor that checks each method's declared
// permission (authz.go), and message size limits) and the HTTP/JSON API
// (package httpapi), one Prometheus registry served at /v1/metrics, and
// the runnables that make up the running process. The domains (the
// orchestrator, the scheduler) are modules (package module) the server
// composes: Config.Modules, DefaultModules in modules.go.
//
// Design decisions:
//
//   - The server knows no domain. Each module registers its types, then
//     gives its parts (controllers, gRPC services, HTTP routes,
//     runnables), which the server wires where its own go; a module's
//     gRPC methods join the one permission table the interceptors read.
//     A part that declares no permission fails New.
//   - Every long-lived part is a Runnable whose Start(ctx) blocks until ctx
//     ends. A Group starts them in order, waiting for those that say when
//     they are ready (Readier), and stops them one at a time in reverse
//     order under one shutdown deadline; the first failure stops the rest.
//     The order of a server is: the leadership hub, gRPC (first up, last
//     down: other servers forward to it), whatever Add registered (Raft, the
//     controller manager), the bootstrap (the default Namespace, stored each
//     time this server gains leadership), and the HTTP API last, so a
//     client's first request already finds "default" and the HTTP API is
//     the first thing to stop taking requests.
//   - Listeners are bound in New, not in Start: port 0 resolves before the
//     server runs (tests, `trellis dev` printing its addresses) and a port
//     in use is an error of New.
//   - Watches never end by themselves, and both http.Server.Shutdown and
//     grpc.Server.GracefulStop wait for open requests; the server ends its
//     watches first, with a retryable error (HTTP: a last "unavailable"
//     line; gRPC: codes.Unavailable), then drains the rest.
//   - A backend's LeaderCh is one channel; the leadership hub fans it out so
//     that the bootstrap, the controller manager and whatever else runs
//     only on the leader each get every transition (Server.Leadership
//     subscribes).
//   - The Raft backend plugs in at one place, Server.openRaft, which has
//     everything it needs at hand: the gRPC server for forwarding and the
//     cluster service (join, remove peer), the metrics registry and Add for
//     its runnables.
package server
