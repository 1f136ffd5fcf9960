// Package tasknet gives a bridge task (`network: bridge`) its network
// namespace through the CNI plugins: one namespace per task, shared by
// all its containers, with an address on a host bridge, a default route
// through it, outbound NAT, loopback up and its ports published on the
// host. It drives Debian's containernetworking-plugins (bridge,
// host-local, firewall, portmap, loopback) with
// github.com/containernetworking/cni/libcni, as Nomad does; the agent
// calls it before a task's first container starts and after its last has
// exited.
//
// The pure part is the configuration: Config (the flags -bridge-name,
// -bridge-subnet, -cni-plugin-dir) and its checks, Conflist (the CNI
// network configuration list the agent writes), the ports' checks and
// their runtime configuration, CheckSubnet against the host's networks.
// The I/O part is Network: Setup, Teardown, Adopt and Sweep; Probe and
// HostNetworks look at the host.
//
// # State
//
// Everything lives under Config.DataDir (the agent's data dir's
// network/), so agents that share a host never see each other's:
//
//	trellis.conflist   the conflist, for people to read
//	netns/<task uid>   the task's namespace, bind-mounted (see internal/netns)
//	ipam/trellis/      host-local's leases: a file per address, holding the task uid
//	cache/             libcni's cached ADD results, read back by DEL
//
// The task's uid is its CNI container id, so every piece of state names
// the task it belongs to: a restarted agent adopts (Adopt) the attachments
// of the tasks it resumes and tears down (Sweep) every other one it finds
// in any of the three places.
//
// # Design decisions
//
//   - The plugins, not netlink code of our own: the veth, the bridge, the
//     IPAM, the NAT and port rules are what every CNI runtime uses, and
//     the firewall plugin accepts the task's forwarded traffic where
//     Docker has set FORWARD's policy to DROP. The loopback plugin runs as
//     a second configuration on "lo", since it handles nothing else.
//   - The namespace is ours, held by a bind mount, never by a process:
//     it outlives an agent killed with SIGKILL, a container's exit and
//     its restart. A docker task's namespace is made by a holder
//     container of the docker driver (Docker joins containers only to
//     another container's namespace), whose namespace is bind-mounted the
//     same way (Request.HolderPID).
//   - Teardown keeps the namespace until the plugins' DEL has run: the
//     bridge plugin finds the task's address, and so its masquerade
//     rule, on the veth inside it. After a reboot the mount point is an
//     empty file: DEL then runs without a namespace and still releases the
//     lease (the rules went with the reboot).
//   - A DEL without libcni's cached result (an agent killed during an
//     ADD) gives the plugins the result they need from the lease and the
//     recorded ports (del.go): without it the firewall and portmap plugins
//     would leave their rules behind.
//   - Host port 0 is a port the agent picks: it binds port 0 and takes
//     what the kernel gave, skipping ports its other tasks publish. A
//     fixed host port is refused when something on the host listens on
//     it, or another task of the agent publishes it: the portmap plugin's
//     DNAT would silently take the port's traffic. The port is free when
//     picked and published at once, but not held: a host process may bind
//     it in between, as with any DNAT-based publishing.
//   - Agents sharing a host and a bridge (`trellis dev -instances N`)
//     share the subnet, each leasing from its own part of it
//     (Config.RangeStart/End, SplitRange): host-local's leases are per
//     agent.
//   - IPv4 only, for now.
package tasknet
