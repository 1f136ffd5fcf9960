// Package command is `trellis proxy`, the mesh's built-in sidecar proxy
// as a process: the agent adds it to every mesh task (the trellis-proxy
// container, internal/agent/sidecar) and it runs in the task's network
// namespace as 1337:1337.
//
// It dials the agent's Unix socket in the task's directory, watches the
// task's snapshots (ProxyService.Watch) and applies each to the proxy
// runtime (internal/proxy's Proxy.Update). While the stream is down it
// keeps serving its last snapshot and redials with backoff. On SIGUSR1
// (the lifecycle's drain signal, sent as the task begins to stop) it
// drains (Proxy.Drain: the inbound listener closes, open connections
// finish, the app's outbound traffic is still carried). On SIGTERM (sent
// once the task's app containers have exited) it drains if it had not,
// waits up to a bound for the connections it carries to end, then closes
// what is left and exits 0.
package command
