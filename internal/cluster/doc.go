// Package cluster makes Trellis servers into one Raft cluster, with the
// semantics Consul and Nomad users know: -bootstrap-expect N and
// -retry-join ADDR.
//
// A server keeps a node id (generated on its first start, in
// DataDir/node-id) and its Raft state in its data dir. On start:
//
//   - A server with Raft state resumes with it: it is a member already.
//   - A fresh server asks every retry-join address about itself over the
//     cluster gRPC service (Info) on its server-to-server port (-server-addr), telling it about itself in the same
//     call, so discovery works whichever side lists the other; answers
//     carry the fresh servers each side knows, so a ring of retry-join
//     addresses is enough. If any answering server belongs to a cluster,
//     the fresh server asks it to be admitted (Join; a follower forwards it
//     to the leader, which adds the server as a voter). Otherwise, once the
//     fresh servers expecting the same N number N, each bootstraps Raft with
//     that identical set. Servers that disagree on N do not bootstrap.
//   - BootstrapExpect 1 bootstraps at once: a single-server cluster
//     (trellis dev).
//
// While it runs, a server keeps its membership current: when the
// configuration has it at an old Raft address or the server registry
// (which followers use to reach the leader's server-to-server port) lacks its current
// addresses, it asks the leader to admit it again. A server removed from
// the configuration (RemovePeer) stays out: it is not re-added behind the
// operator's back.
//
// The decisions (when to bootstrap and with whom, how to admit a server)
// are pure functions over plain values (decideFormation, planJoin); the
// loops around them only do I/O.
package cluster
