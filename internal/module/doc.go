// Package module is the seam between the server and the domains it serves.
// A domain (the orchestrator, the scheduler, later the CA, the catalog, the
// mesh, ACLs, xDS) is one Module: its resource types, and what the server
// runs for it — controllers, gRPC services, HTTP routes, runnables — each
// declared with the permission a caller needs. The server composes a list
// of modules (server.Config.Modules, server.DefaultModules); adding a domain
// is writing its module and adding it to that list, with no edit to a
// shared package.
//
// Design decisions:
//
//   - Two steps, in this order for every module: Register adds the types
//     to the registry, then Setup builds the parts. Setup runs once every
//     module has registered, so a module may check that a type it depends
//     on is served (the scheduler needs the orchestrator's Task) and say
//     so as an error, rather than depending on the order of the list.
//   - Setup gets Deps, the few things of the server a domain may use (the
//     resource API, the registry, leadership, the controllers' cache, a
//     logger, the metrics registry and some facts of the cluster), never
//     the server itself: a
//     module that needed more would be reaching into another layer. It
//     returns Parts, plain values the server wires; a module starts
//     nothing itself.
//   - Permissions are declared beside what they guard, and checked when
//     the server is assembled: a gRPC method or HTTP route without one,
//     or a permission for a method the service does not have, fails
//     server.New (Parts.Check), before anything is served. At run time
//     the server's one gRPC interceptor and the HTTP router check them as
//     they check the server's own (see internal/acl).
//   - A module owns its configuration and its commands. Its settings are
//     its own flags (Flagged: Flags for each Process, CheckFlags), bound
//     to the module value the server is given, never fields of
//     server.Config; the CLI adds them to `trellis server` and `trellis
//     dev` (AddFlags), refusing a name with two owners at startup. Its
//     commands are a cli.Commander (internal/cli, so that this package
//     does not depend on the CLI), which the CLI asks for without setting
//     the module up. Adding a domain then touches neither internal/server
//     (but for its list of modules) nor cmd/trellis.
//   - A module's runnables run after the gRPC servers are up and before the
//     controller manager and the HTTP API, stopped in reverse, in the order
//     of the module list and then of Parts.Runnables.
package module
