// Package dns is the catalog's DNS interface: it answers, for the
// servers and the agents, the names of the services of the catalog
// (docs/catalog.md, "DNS"), with github.com/miekg/dns for the wire format
// and the listeners.
//
//	<service>.service[.<namespace>].trellis.        A, AAAA, SRV
//	<tag>.<service>.service[.<namespace>].trellis.  the same, of the instances with that tag
//	<instance>.instance.trellis.                    A, AAAA of an Instance (a machine)
//	<hex>.addr.trellis.                             the address an SRV record's target names
//
// Design decisions:
//
//   - The answer is a pure function, Answer: a question and a catalog
//     snapshot (Catalog) in, a reply out, tested by tables. The listener
//     (Server) is I/O only: it reads a query, calls Answer, truncates the
//     reply to what the transport carries (the client's EDNS0 size over
//     UDP, 512 bytes without it, TC set) and writes it.
//   - The snapshot is the process's informer (InformerCatalog): a server's
//     own store's, followers too; an agent's, fed over its one link to the
//     servers. A query never makes a round trip to a server. What the
//     answer needs of an instance (its address, port, tags, and whether it
//     passes) is worked out once per change, as the cache applies it
//     (EndpointOf, a controller.Derived), not once per query.
//   - A repeated question is answered from the reply packed before, while
//     the catalog's revision (Revisioned: the informer's last change of
//     each type it reads) stays the same: Answer is a function of the
//     query, the catalog and the rotation alone, so the kept reply is
//     the one it would make. This took an agent on one core from 17,800
//     to 30,000-43,000 queries/s for a service of 10 instances, beside
//     nsd's 37,000-40,000 (bench/README.md, "DNS").
//   - Only passing instances are answered (catalog.HealthOf: an instance
//     whose checks are not all passing, or not yet reported, gets no
//     traffic). A name that exists (a Service resource, or an instance that
//     names the service, whatever its health) and has no passing instance
//     is answered NOERROR with no record (NODATA), never NXDOMAIN and never
//     SERVFAIL: a resolver that caches a negative answer for a while must
//     not forget that the name exists. A name nobody registered is
//     NXDOMAIN. Both carry the zone's SOA, whose negative TTL is the
//     answers' TTL (0 by default: the catalog changes as tasks come and go,
//     and a cached address is one that may already be gone).
//   - Until the process's cache has listed the catalog whole (a server
//     catching up, an agent not yet connected), every query of the zone is
//     SERVFAIL: a resolver then asks another server, or again, and keeps
//     no NXDOMAIN of a name that may exist.
//   - A query the server cannot read (a truncated packet, a name over 255
//     bytes such as one of 300 labels, more than one question) is FORMERR;
//     one outside trellis., of another class than IN, or a zone transfer
//     is REFUSED; another opcode is NOTIMP. The listener answers the next
//     query as if nothing happened.
//   - An SRV record's target is the instance's address encoded as a name
//     (<hex>.addr.trellis., as Consul does), with its A or AAAA record in
//     the additional section: two instances on one machine (bridge tasks)
//     have different addresses, and an instance registered from outside
//     may have one that no Instance has. An instance whose address is a
//     host name has that name as its target and is not in A/AAAA answers.
package dns
