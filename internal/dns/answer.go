package dns

import (
	"net/netip"
	"slices"
	"strings"

	miekg "github.com/miekg/dns"
)

// Endpoint is a service instance as the answers need it.
type Endpoint struct {
	// Name is the ServiceInstance's name.
	Name string
	// Addr is its address when that is an IP address; Host its address
	// otherwise (a host name), fully qualified.
	Addr netip.Addr
	Host string
	Port uint16
	// Tags are its tags, lower case.
	Tags []string
	// Passing: its health (catalog.HealthOf) is passing.
	Passing bool
}

// Catalog is the snapshot of the catalog that answers are made from. Its
// methods must not change what they return between two calls of one
// Answer, and callers never change it.
type Catalog interface {
	// Service returns the instances of service name in namespace ns,
	// whatever their health, and whether the service is known: a Service
	// resource, or an instance that names it.
	Service(ns, name string) (eps []Endpoint, known bool)
	// Instance returns the address of the Instance (machine) called name
	// (invalid when it has none to answer); false when there is none.
	Instance(name string) (netip.Addr, bool)
	// Synced reports whether the snapshot holds the whole catalog: false
	// until a process's cache has had its first full listing.
	Synced() bool
}

// MaxUDPSize is the largest UDP reply the server sends, whatever size a
// client's EDNS0 offers (the size DNS flag day 2020 settled on, which no
// path fragments).
const MaxUDPSize = 1232

// Options tune the answers.
type Options struct {
	// TTL of every record, and the negative TTL of the zone's SOA (0: no
	// resolver keeps an answer).
	TTL uint32
	// Rotate starts the list of a service's instances at this offset
	// (modulo its length), so that clients that take the first address
	// spread over the instances; the listener counts it up per query.
	Rotate uint32
}

// Answer is the reply to req from the catalog cat: see the package
// comment for what each name and each malformed query gets. It is pure:
// the reply is made of req, cat and o alone, and is not truncated (the
// listener does that for its transport).
func Answer(req *miekg.Msg, cat Catalog, o Options) *miekg.Msg {
	r := new(miekg.Msg)
	r.SetReply(req)
	r.Authoritative = true
	r.RecursionAvailable = false
	r.Compress = true
	if req.IsEdns0() != nil {
		r.SetEdns0(MaxUDPSize, false) // the size this server takes
	}
	if req.Opcode != miekg.OpcodeQuery {
		r.Rcode = miekg.RcodeNotImplemented
		return r
	}
	if len(req.Question) != 1 {
		r.Rcode = miekg.RcodeFormatError
		return r
	}
	q := req.Question[0]
	switch {
	case !InZone(q.Name), q.Qclass != miekg.ClassINET && q.Qclass != miekg.ClassANY,
		q.Qtype == miekg.TypeAXFR, q.Qtype == miekg.TypeIXFR:
		r.Rcode = miekg.RcodeRefused
		return r
	}
	if !cat.Synced() {
		// Not NXDOMAIN, which a resolver would cache for a name that may
		// exist: SERVFAIL makes it ask another server, or again.
		r.Rcode = miekg.RcodeServerFailure
		return r
	}
	name := ParseName(q.Name)
	a := answerer{r: r, q: q, o: o}
	switch name.Kind {
	case KindApex:
		if q.Qtype == miekg.TypeSOA || q.Qtype == miekg.TypeANY {
			r.Answer = append(r.Answer, soa(o.TTL))
		} else {
			a.noData()
		}
	case KindService:
		a.service(cat, name)
	case KindInstance:
		addr, ok := cat.Instance(name.Instance)
		if !ok {
			a.nxDomain()
			return r
		}
		a.addresses(q.Name, []netip.Addr{addr})
	case KindAddr:
		a.addresses(q.Name, []netip.Addr{name.Addr})
	default:
		a.nxDomain()
	}
	return r
}

type answerer struct {
	r *miekg.Msg
	q miekg.Question
	o Options
}

func (a answerer) hdr(name string, t uint16) miekg.RR_Header {
	return miekg.RR_Header{Name: name, Rrtype: t, Class: miekg.ClassINET, Ttl: a.o.TTL}
}

func (a answerer) nxDomain() {
	a.r.Rcode = miekg.RcodeNameError
	a.r.Ns = append(a.r.Ns, soa(a.o.TTL))
}

func (a answerer) noData() {
	if len(a.r.Answer) == 0 {
		a.r.Ns = append(a.r.Ns, soa(a.o.TTL))
	}
}

// wants reports whether the question asks for records of type t.
func (a answerer) wants(t uint16) bool {
	return a.q.Qtype == t || a.q.Qtype == miekg.TypeANY
}

// addressRR is the A or AAAA record of addr under name; nil when the
// question does not ask for it.
func (a answerer) addressRR(name string, addr netip.Addr) miekg.RR {
	addr = addr.Unmap()
	switch {
	case addr.Is4() && a.wants(miekg.TypeA):
		return &miekg.A{Hdr: a.hdr(name, miekg.TypeA), A: addr.AsSlice()}
	case addr.Is6() && a.wants(miekg.TypeAAAA):
		return &miekg.AAAA{Hdr: a.hdr(name, miekg.TypeAAAA), AAAA: addr.AsSlice()}
	}
	return nil
}

// addresses answers name with the A or AAAA records of addrs, each once.
func (a answerer) addresses(name string, addrs []netip.Addr) {
	seen := make([]netip.Addr, 0, len(addrs)) // a service's few: a scan beats a map
	for _, addr := range addrs {
		addr = addr.Unmap()
		if slices.Contains(seen, addr) {
			continue
		}
		seen = append(seen, addr)
		if rr := a.addressRR(name, addr); rr != nil {
			a.r.Answer = append(a.r.Answer, rr)
		}
	}
	a.noData()
}

func (a answerer) service(cat Catalog, n Name) {
	eps, known := cat.Service(n.Namespace, n.Service)
	if n.Tag != "" {
		var tagged []Endpoint
		for _, ep := range eps {
			if hasTag(ep, n.Tag) {
				tagged = append(tagged, ep)
			}
		}
		eps, known = tagged, len(tagged) > 0
	}
	if !known {
		a.nxDomain()
		return
	}
	var passing []Endpoint
	for _, ep := range eps {
		if ep.Passing {
			passing = append(passing, ep)
		}
	}
	if len(passing) > 0 {
		k := int(a.o.Rotate % uint32(len(passing)))
		passing = append(passing[k:len(passing):len(passing)], passing[:k]...)
	}
	if a.q.Qtype == miekg.TypeSRV || a.q.Qtype == miekg.TypeANY {
		a.srv(passing)
		return
	}
	var addrs []netip.Addr
	for _, ep := range passing {
		if ep.Addr.IsValid() {
			addrs = append(addrs, ep.Addr)
		}
	}
	a.addresses(a.q.Name, addrs)
}

// srv answers with an SRV record per instance, each once (a record set
// has no duplicates, RFC 2181), its address's record in the additional
// section (each once).
func (a answerer) srv(eps []Endpoint) {
	seen := make([]netip.Addr, 0, len(eps))
	a.r.Answer = slices.Grow(a.r.Answer, len(eps))
	for _, ep := range eps {
		target := ep.Host
		if ep.Addr.IsValid() {
			target = AddrName(ep.Addr)
		}
		if slices.ContainsFunc(a.r.Answer, func(rr miekg.RR) bool {
			s, ok := rr.(*miekg.SRV)
			return ok && s.Port == ep.Port && s.Target == target
		}) {
			continue // two instances at one address and port (host tasks of two agents on one machine): one record
		}
		a.r.Answer = append(a.r.Answer, &miekg.SRV{Hdr: a.hdr(a.q.Name, miekg.TypeSRV), Priority: 1, Weight: 1, Port: ep.Port, Target: target})
		if !ep.Addr.IsValid() || slices.Contains(seen, ep.Addr.Unmap()) {
			continue
		}
		seen = append(seen, ep.Addr.Unmap())
		b := answerer{r: a.r, q: miekg.Question{Qtype: miekg.TypeANY}, o: a.o}
		if rr := b.addressRR(target, ep.Addr); rr != nil {
			a.r.Extra = append(a.r.Extra, rr)
		}
	}
	a.noData()
}

func hasTag(ep Endpoint, tag string) bool {
	for _, t := range ep.Tags {
		if t == tag {
			return true
		}
	}
	return false
}

// soa is the zone's SOA record; its minimum is the negative answers' TTL.
func soa(ttl uint32) *miekg.SOA {
	return &miekg.SOA{
		Hdr:     miekg.RR_Header{Name: Domain, Rrtype: miekg.TypeSOA, Class: miekg.ClassINET, Ttl: ttl},
		Ns:      "ns." + Domain,
		Mbox:    "hostmaster." + Domain,
		Serial:  1,
		Refresh: 3600,
		Retry:   600,
		Expire:  86400,
		Minttl:  ttl,
	}
}

// lowerTags returns tags in lower case, as names are compared.
func lowerTags(tags []string) []string {
	out := make([]string, len(tags))
	for i, t := range tags {
		out[i] = strings.ToLower(t)
	}
	return out
}
