// Package redirect is transparent traffic redirection for a task in the
// mesh: iptables NAT rules, written in the task's network namespace, that
// send the app's TCP through its sidecar proxy without the app knowing.
// It is seed 004 (App Mesh's init container script) as Go, and what
// `trellis connect redirect-traffic` and, for mesh tasks, the agent run.
//
// In the nat table of the namespace:
//
//   - TRELLIS_OUTBOUND, jumped to from OUTPUT for TCP to any address that
//     is not the namespace's own, sends it to the proxy's outbound port
//     (15001), where the proxy reads the original destination with
//     SO_ORIGINAL_DST (OriginalDst). The proxy's own user and group (1337)
//     return first, or its connections would come back to it; so do the
//     excluded ports, CIDRs (the instance metadata address by default) and
//     users.
//   - TRELLIS_INBOUND, jumped to from PREROUTING for TCP from any address
//     that is not the namespace's own, sends what arrives for the app's
//     ports (or all ports but the excluded) to the proxy's inbound port
//     (15000).
//   - TRELLIS_DNS, only when asked for, DNATs DNS queries to a resolver
//     (an address, or a CIDR: 0.0.0.0/0 for all) to the agent's DNS
//     server. ApplyDNS writes it alone: what the agent writes in every
//     bridge task's namespace.
//
// Rules (pure: a Config in, iptables-restore lines out) writes them;
// Apply and Remove run iptables-save and iptables-restore in the current
// network namespace; InNetns runs a function in another one.
//
// # Design decisions
//
//   - One iptables-restore --noflush per family, not one iptables call per
//     rule (seed 004's way). The tool commits its whole input as one
//     transaction, with the nf_tables backend as with legacy, so a
//     refused line leaves the table as it was: no half-redirected task,
//     where for instance outbound traffic reaches the proxy but the
//     proxy's own is not excluded and loops.
//   - Idempotent by replacing, in that same transaction. iptables-restore
//     --noflush flushes a chain its input declares; the jumps from the
//     built-in chains, which no flush of ours may touch, are deleted by
//     their text as iptables-save printed them (a tool reads its own
//     output back, whatever its backend) and added again. Running Apply
//     twice, or with a new Config, leaves exactly one set of rules; a
//     chain the new Config no longer needs is deleted.
//   - The tools, not a netlink or nftables library: the rules stay the
//     seed's readable lines (`--dry-run` prints them, and they paste into
//     iptables-restore), and the same input works on both backends; no
//     new dependency.
//   - IPv6 only where asked and present: with --ipv6, ip6tables writes the
//     same rules when the namespace has an IPv6 address besides loopback.
//     Its input is checked (--test) before the IPv4 one is committed, and
//     if it still fails the saved IPv4 table is put back.
package redirect
