package dns

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	miekg "github.com/miekg/dns"
)

// fakeCatalog is a catalog snapshot as plain values: the input of
// Answer, not a stand-in for it.
type fakeCatalog struct {
	services  map[string][]Endpoint // "ns/name"
	known     map[string]bool       // Service resources with no instance
	instances map[string]netip.Addr
	notSynced bool
}

func (c fakeCatalog) Synced() bool { return !c.notSynced }

func (c fakeCatalog) Service(ns, name string) ([]Endpoint, bool) {
	eps, ok := c.services[ns+"/"+name]
	return eps, ok || c.known[ns+"/"+name]
}

func (c fakeCatalog) Instance(name string) (netip.Addr, bool) {
	a, ok := c.instances[name]
	return a, ok
}

func ep(name, addr string, port uint16, passing bool, tags ...string) Endpoint {
	e := Endpoint{Name: name, Port: port, Passing: passing, Tags: tags}
	if a, err := netip.ParseAddr(addr); err == nil {
		e.Addr = a
	} else {
		e.Host = addr + "."
	}
	return e
}

var testCatalog = fakeCatalog{
	services: map[string][]Endpoint{
		"default/api": {
			ep("api-1", "10.0.0.1", 8080, true, "v1", "primary"),
			ep("api-2", "10.0.0.2", 8081, true, "v2"),
			ep("api-3", "10.0.0.3", 8082, false, "v1", "canary"), // critical
			ep("api-4", "fd00::4", 8083, true, "v2"),
			ep("api-5", "10.0.0.1", 9090, true, "v1"), // a second instance on api-1's address
		},
		"prod/api":      {ep("api-p", "10.1.0.1", 80, true)},
		"default/down":  {ep("down-1", "10.0.0.9", 80, false)},
		"default/named": {ep("named-1", "db.example.com", 5432, true)},
		"default/twice": {ep("twice-1", "10.0.0.7", 80, true), ep("twice-2", "10.0.0.7", 80, true)},
	},
	known:     map[string]bool{"default/empty": true},
	instances: map[string]netip.Addr{"i-1": netip.MustParseAddr("192.168.1.5"), "i-noaddr": {}},
}

func query(name string, t uint16) *miekg.Msg {
	m := new(miekg.Msg)
	m.SetQuestion(name, t)
	return m
}

// rrs renders a section as "type value" lines, sorted.
func rrs(section []miekg.RR) []string {
	var out []string
	for _, rr := range section {
		switch r := rr.(type) {
		case *miekg.A:
			out = append(out, r.Hdr.Name+" A "+r.A.String())
		case *miekg.AAAA:
			out = append(out, r.Hdr.Name+" AAAA "+r.AAAA.String())
		case *miekg.SRV:
			out = append(out, fmt.Sprintf("%s SRV %d %s", r.Hdr.Name, r.Port, r.Target))
		case *miekg.SOA:
			out = append(out, "SOA")
		case *miekg.OPT:
		default:
			out = append(out, rr.String())
		}
	}
	slices.Sort(out)
	return out
}

func TestAnswer(t *testing.T) {
	const svc = "api.service.default.trellis."
	for _, tc := range []struct {
		name       string
		q          *miekg.Msg
		rcode      int
		answer, ns []string
		extra      []string
	}{
		{"A: the passing instances' IPv4 addresses, each once", query(svc, miekg.TypeA), miekg.RcodeSuccess,
			[]string{svc + " A 10.0.0.1", svc + " A 10.0.0.2"}, nil, nil},
		{"AAAA: the IPv6 ones", query(svc, miekg.TypeAAAA), miekg.RcodeSuccess,
			[]string{svc + " AAAA fd00::4"}, nil, nil},
		{"no namespace means default", query("api.service.trellis.", miekg.TypeA), miekg.RcodeSuccess,
			[]string{"api.service.trellis. A 10.0.0.1", "api.service.trellis. A 10.0.0.2"}, nil, nil},
		{"names are compared without case", query("API.Service.Default.TRELLIS.", miekg.TypeA), miekg.RcodeSuccess,
			[]string{"API.Service.Default.TRELLIS. A 10.0.0.1", "API.Service.Default.TRELLIS. A 10.0.0.2"}, nil, nil},
		{"another namespace", query("api.service.prod.trellis.", miekg.TypeA), miekg.RcodeSuccess,
			[]string{"api.service.prod.trellis. A 10.1.0.1"}, nil, nil},
		{"SRV: each passing instance's port, its address in the additional section", query(svc, miekg.TypeSRV), miekg.RcodeSuccess,
			[]string{svc + " SRV 8080 0a000001.addr.trellis.", svc + " SRV 8081 0a000002.addr.trellis.", svc + " SRV 8083 fd000000000000000000000000000004.addr.trellis.", svc + " SRV 9090 0a000001.addr.trellis."}, nil,
			[]string{"0a000001.addr.trellis. A 10.0.0.1", "0a000002.addr.trellis. A 10.0.0.2", "fd000000000000000000000000000004.addr.trellis. AAAA fd00::4"}},
		{"a tag filters", query("v1.api.service.default.trellis.", miekg.TypeSRV), miekg.RcodeSuccess,
			[]string{"v1.api.service.default.trellis. SRV 8080 0a000001.addr.trellis.", "v1.api.service.default.trellis. SRV 9090 0a000001.addr.trellis."}, nil,
			[]string{"0a000001.addr.trellis. A 10.0.0.1"}},
		{"a tag without a namespace", query("v2.api.service.trellis.", miekg.TypeA), miekg.RcodeSuccess,
			[]string{"v2.api.service.trellis. A 10.0.0.2"}, nil, nil},
		{"a tag nobody has", query("v9.api.service.default.trellis.", miekg.TypeA), miekg.RcodeNameError, nil, []string{"SOA"}, nil},
		{"a tag only a critical instance has: the name exists, no record", query("canary.api.service.trellis.", miekg.TypeA), miekg.RcodeSuccess, nil, []string{"SOA"}, nil},
		{"tags are compared without case", query("PRIMARY.api.service.trellis.", miekg.TypeA), miekg.RcodeSuccess,
			[]string{"PRIMARY.api.service.trellis. A 10.0.0.1"}, nil, nil},
		{"every instance critical: NODATA, not NXDOMAIN", query("down.service.trellis.", miekg.TypeA), miekg.RcodeSuccess, nil, []string{"SOA"}, nil},
		{"a Service with no instance: NODATA", query("empty.service.trellis.", miekg.TypeSRV), miekg.RcodeSuccess, nil, []string{"SOA"}, nil},
		{"an unknown service", query("nope.service.default.trellis.", miekg.TypeA), miekg.RcodeNameError, nil, []string{"SOA"}, nil},
		{"an unknown namespace", query("api.service.nope.trellis.", miekg.TypeA), miekg.RcodeNameError, nil, []string{"SOA"}, nil},
		{"a host-name address: no A record", query("named.service.trellis.", miekg.TypeA), miekg.RcodeSuccess, nil, []string{"SOA"}, nil},
		{"a host-name address: its name is the SRV target", query("named.service.trellis.", miekg.TypeSRV), miekg.RcodeSuccess,
			[]string{"named.service.trellis. SRV 5432 db.example.com."}, nil, nil},
		{"two instances at one address and port: one SRV record", query("twice.service.trellis.", miekg.TypeSRV), miekg.RcodeSuccess,
			[]string{"twice.service.trellis. SRV 80 0a000007.addr.trellis."}, nil, []string{"0a000007.addr.trellis. A 10.0.0.7"}},
		{"an Instance's address", query("i-1.instance.trellis.", miekg.TypeA), miekg.RcodeSuccess,
			[]string{"i-1.instance.trellis. A 192.168.1.5"}, nil, nil},
		{"an Instance asked for AAAA: NODATA", query("i-1.instance.trellis.", miekg.TypeAAAA), miekg.RcodeSuccess, nil, []string{"SOA"}, nil},
		{"an Instance with no IP address: NODATA", query("i-noaddr.instance.trellis.", miekg.TypeA), miekg.RcodeSuccess, nil, []string{"SOA"}, nil},
		{"an unknown Instance", query("i-9.instance.trellis.", miekg.TypeA), miekg.RcodeNameError, nil, []string{"SOA"}, nil},
		{"an SRV target resolves", query("0a000002.addr.trellis.", miekg.TypeA), miekg.RcodeSuccess,
			[]string{"0a000002.addr.trellis. A 10.0.0.2"}, nil, nil},
		{"a bad address name", query("zz000002.addr.trellis.", miekg.TypeA), miekg.RcodeNameError, nil, []string{"SOA"}, nil},
		{"the zone's SOA", query("trellis.", miekg.TypeSOA), miekg.RcodeSuccess, []string{"SOA"}, nil, nil},
		{"a name of the zone that names nothing", query("x.y.z.trellis.", miekg.TypeA), miekg.RcodeNameError, nil, []string{"SOA"}, nil},
		{"a name outside the zone is refused", query("example.com.", miekg.TypeA), miekg.RcodeRefused, nil, nil, nil},
		{"a name that ends like the zone is outside it", query("nottrellis.", miekg.TypeA), miekg.RcodeRefused, nil, nil, nil},
		{"a zone transfer is refused", query("trellis.", miekg.TypeAXFR), miekg.RcodeRefused, nil, nil, nil},
		{"two questions: FORMERR", func() *miekg.Msg {
			m := query(svc, miekg.TypeA)
			m.Question = append(m.Question, m.Question[0])
			return m
		}(), miekg.RcodeFormatError, nil, nil, nil},
		{"no question: FORMERR", func() *miekg.Msg { m := query(svc, miekg.TypeA); m.Question = nil; return m }(), miekg.RcodeFormatError, nil, nil, nil},
		{"NOTIFY: NOTIMP", func() *miekg.Msg { m := query(svc, miekg.TypeA); m.Opcode = miekg.OpcodeNotify; return m }(), miekg.RcodeNotImplemented, nil, nil, nil},
		{"before the first full listing: SERVFAIL, not a NXDOMAIN a resolver would keep", query(svc, miekg.TypeA), miekg.RcodeServerFailure, nil, nil, nil},
		{"class CHAOS is refused", func() *miekg.Msg { m := query(svc, miekg.TypeA); m.Question[0].Qclass = miekg.ClassCHAOS; return m }(), miekg.RcodeRefused, nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cat := testCatalog
			cat.notSynced = strings.HasPrefix(tc.name, "before the first full listing")
			r := Answer(tc.q, cat, Options{})
			if r.Rcode != tc.rcode {
				t.Fatalf("rcode %s; want %s (%v)", miekg.RcodeToString[r.Rcode], miekg.RcodeToString[tc.rcode], r)
			}
			if !r.Response || r.Id != tc.q.Id || (tc.rcode == miekg.RcodeSuccess || tc.rcode == miekg.RcodeNameError) && !r.Authoritative {
				t.Errorf("reply header %+v", r.MsgHdr)
			}
			for _, s := range []struct {
				name      string
				got, want []string
			}{{"answer", rrs(r.Answer), tc.answer}, {"authority", rrs(r.Ns), tc.ns}, {"additional", rrs(r.Extra), tc.extra}} {
				if !slices.Equal(s.got, s.want) {
					t.Errorf("%s:\n got %q\nwant %q", s.name, s.got, s.want)
				}
			}
			for _, rr := range append(append(r.Answer, r.Ns...), r.Extra...) {
				if rr.Header().Ttl != 0 {
					t.Errorf("TTL %d; want 0 by default: %v", rr.Header().Ttl, rr)
				}
			}
		})
	}
}

// Rotate starts the passing instances at its offset, and the TTL option
// reaches every record and the SOA's negative TTL.
func TestAnswerRotatesAndTakesTheTTL(t *testing.T) {
	var firsts []string
	for k := range uint32(3) {
		r := Answer(query("v2.api.service.trellis.", miekg.TypeSRV), testCatalog, Options{Rotate: k, TTL: 5})
		firsts = append(firsts, r.Answer[0].(*miekg.SRV).Target)
		for _, rr := range r.Answer {
			if rr.Header().Ttl != 5 {
				t.Errorf("TTL %d; want 5", rr.Header().Ttl)
			}
		}
	}
	want := []string{"0a000002.addr.trellis.", "fd000000000000000000000000000004.addr.trellis.", "0a000002.addr.trellis."}
	if !slices.Equal(firsts, want) {
		t.Errorf("first targets %q; want %q", firsts, want)
	}
	r := Answer(query("nope.service.trellis.", miekg.TypeA), testCatalog, Options{TTL: 7})
	if s := r.Ns[0].(*miekg.SOA); s.Minttl != 7 || s.Hdr.Ttl != 7 {
		t.Errorf("SOA %v; want TTL and minimum 7", s)
	}
}

func TestParseName(t *testing.T) {
	for in, want := range map[string]Name{
		"web.service.trellis.":           {Kind: KindService, Namespace: "default", Service: "web"},
		"web.service.prod.trellis.":      {Kind: KindService, Namespace: "prod", Service: "web"},
		"v1.web.service.trellis.":        {Kind: KindService, Namespace: "default", Service: "web", Tag: "v1"},
		"v1.web.service.prod.trellis.":   {Kind: KindService, Namespace: "prod", Service: "web", Tag: "v1"},
		"i-1.instance.trellis.":          {Kind: KindInstance, Instance: "i-1"},
		"7f000001.addr.trellis.":         {Kind: KindAddr, Addr: netip.MustParseAddr("127.0.0.1")},
		"trellis.":                       {Kind: KindApex},
		"a.b.c.d.e.trellis.":             {},
		"service.trellis.":               {},
		".service.trellis.":              {},
		"web.service..trellis.":          {},
		"x.v1.web.service.prod.trellis.": {},
		"web.instance.prod.trellis.":     {},
		"7f0001.addr.trellis.":           {},
		"web.service.default.example.":   {},
	} {
		if got := ParseName(in); got != want {
			t.Errorf("ParseName(%q) = %+v; want %+v", in, got, want)
		}
	}
}
