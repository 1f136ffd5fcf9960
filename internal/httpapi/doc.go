// Package httpapi is Trellis's HTTP/JSON API: the face of the resource
// service for people, the CLI, the UI and outside tools. Its paths, JSON
// shapes and status codes are a contract:
//
//	PUT    /v1/resources/{group}/{version}/{kind}/{name}  write (body: wire.WriteRequest; "version" makes it a CAS)
//	GET    /v1/resources/{group}/{version}/{kind}/{name}  read (?consistent=1 for a strong read)
//	DELETE /v1/resources/{group}/{version}/{kind}/{name}  delete, idempotent (?version= makes it a CAS)
//	GET    /v1/resources/{group}/{version}/{kind}         list: {"resources":[...]} (?prefix=, ?consistent=1)
//	GET    /v1/resources/{group}/{version}/{kind}?watch=1 watch: newline-delimited wire.Event (?index=N resumes)
//	PUT    /v1/batch                                      atomic write of several resources (body: wire.BatchRequest)
//	GET    /v1/status/leader                              the leader's Raft address as a JSON string, "" if none
//	GET    /v1/status/peers                               the voters' Raft addresses as a JSON list
//	GET    /v1/health                                     200 {"status":"ok"}, or 503 when there is no leader
//	GET    /v1/metrics                                    Prometheus text format
//
// Namespaced types take ?namespace= (default "default"; "*" lists or watches
// every namespace); cluster-scoped types refuse one. The ACL token comes
// from X-Trellis-Token or Authorization: Bearer and travels to the resource
// service in the context. Every route is registered with the permission it
// needs (handle), checked before its handler runs; Handler.Routes lists
// them.
//
// Design decisions:
//
//   - The package imports no domain. A domain's own operations (the
//     scheduler's /v1/environments) are routes its module gives the
//     server (Config.Routes), registered and checked exactly as the API's
//     own, and written on the helpers of modules.go (DecodeJSON, Params,
//     InputError, WriteJSON, ToWire, ProtoJSON), so that they refuse bad
//     input and answer errors the same way. A route without a permission,
//     or one that clashes with another, fails New.
//   - A resource's data is the plain protojson form of its registered
//     message, not an Any: the path already names the type. Field names are
//     the proto names (group_version, observed_generation) everywhere, in
//     data too, and input accepts the lowerCamel JSON names as well. Unknown
//     fields in data are refused with their full path (data.spec.nme) and
//     the fields the message does have, before protojson sees the data.
//   - Every error is {"error": "...", "code": "..."} (wire.Error); the codes
//     are wire.Code*. The resource service's gRPC codes map through one
//     table (grpcToHTTP); the handler's own refusals name the field at fault.
//   - Unknown query parameters are refused: a misspelled ?namespce= would
//     otherwise quietly act on "default".
//   - Bodies are cut at a limit with http.MaxBytesReader (1 MiB for a
//     resource plus room for its envelope; 32 MiB for a batch) and refused
//     with 413 before any of it is decoded into a message.
//   - A watch is a long response: headers go out at once, each event is a
//     flushed line, and a watch the server ends (the watcher fell behind,
//     the server stops) gets a last {"op":"error"} line so the client knows
//     to list again or resume from the last index it saw. Handler.Shutdown
//     ends open watches, which http.Server.Shutdown would otherwise wait on.
//   - A panic in a handler is logged with its stack and answered with a 500
//     (or, when a response was already under way, the connection is
//     aborted); it never takes the server down.
//   - Metrics are labelled by routing pattern, never by a resource's name.
package httpapi
