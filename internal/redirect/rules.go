package redirect

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
)

// The chains the rules live in. Everything Trellis writes is in these,
// but for one jump to each from a built-in chain, so that the rules can
// be replaced and removed without touching anyone else's.
const (
	InboundChain  = "TRELLIS_INBOUND"  // from PREROUTING: TCP from outside to the app
	OutboundChain = "TRELLIS_OUTBOUND" // from OUTPUT: TCP the namespace sends out
	DNSChain      = "TRELLIS_DNS"      // from OUTPUT: DNS queries to the resolver
)

// chains are ours, in the order they are declared.
var chains = []string{InboundChain, OutboundChain, DNSChain}

func isOurChain(name string) bool { return slices.Contains(chains, name) }

// Family is an IP version: its rules are written with iptables (IPv4) or
// ip6tables (IPv6).
type Family int

const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	if f == IPv6 {
		return "IPv6"
	}
	return "IPv4"
}

// multiportMax is how many ports one -m multiport match takes.
const multiportMax = 15

// Rules is the iptables-restore input, for the nat table of one family,
// that sets up cfg in a namespace where none of Trellis's chains exist:
// the lines of seed 004's script, in its order, with Trellis's chain
// names. Apply adds to it what replaces rules already there. For IPv6,
// only the IPv6 CIDRs and DNS resolver of cfg are used, and the other way
// round.
func Rules(cfg Config, family Family) ([]string, error) {
	p, err := cfg.check()
	if err != nil {
		return nil, err
	}
	return p.rules(family), nil
}

func (p plan) rules(family Family) []string {
	inbound := p.AllInbound || len(p.AppPorts) > 0
	dns := p.dnsResolver.IsValid() && (p.dnsResolver.Addr().Is6() == (family == IPv6))
	out := []string{"*nat"}
	for _, c := range chains {
		if c == InboundChain && !inbound || c == DNSChain && !dns {
			continue
		}
		out = append(out, ":"+c+" - [0:0]")
	}
	add := func(chain, rule string) { out = append(out, "-A "+chain+" "+rule) }

	if dns {
		// Before the outbound jump: a DNS query over TCP goes to the
		// resolver, not to the proxy.
		out = append(out, dnsRules(p.dnsResolver, p.dnsTo)...)
	}

	add(OutboundChain, "-m owner --uid-owner "+strconv.Itoa(p.ProxyUID)+" -j RETURN")
	add(OutboundChain, "-m owner --gid-owner "+strconv.Itoa(p.ProxyGID)+" -j RETURN")
	for _, uid := range dedupe(p.ExcludeUIDs) {
		if uid != p.ProxyUID {
			add(OutboundChain, "-m owner --uid-owner "+strconv.Itoa(uid)+" -j RETURN")
		}
	}
	for _, ports := range portGroups(p.ExcludeOutboundPorts) {
		add(OutboundChain, "-p tcp -m multiport --dports "+ports+" -j RETURN")
	}
	for _, cidr := range dedupe(p.cidrs) {
		if cidr.Addr().Is6() == (family == IPv6) {
			add(OutboundChain, "-p tcp -d "+cidr.String()+" -j RETURN")
		}
	}
	add(OutboundChain, "-p tcp -j REDIRECT --to-ports "+strconv.Itoa(p.ProxyOutboundPort))
	add("OUTPUT", "-p tcp -m addrtype ! --dst-type LOCAL -j "+OutboundChain)

	if inbound {
		to := strconv.Itoa(p.ProxyInboundPort)
		if p.AllInbound {
			for _, ports := range portGroups(p.ExcludeInboundPorts) {
				add(InboundChain, "-p tcp -m multiport --dports "+ports+" -j RETURN")
			}
			add(InboundChain, "-p tcp -j REDIRECT --to-ports "+to)
		} else {
			for _, ports := range portGroups(p.AppPorts) {
				add(InboundChain, "-p tcp -m multiport --dports "+ports+" -j REDIRECT --to-ports "+to)
			}
		}
		add("PREROUTING", "-p tcp -m addrtype ! --src-type LOCAL -j "+InboundChain)
	}
	return append(out, "COMMIT")
}

// portGroups writes ports as multiport lists of at most multiportMax,
// each port once, in their first order.
func portGroups(ports []int) []string {
	ports = dedupe(ports)
	var groups []string
	for len(ports) > 0 {
		n := min(len(ports), multiportMax)
		groups = append(groups, portList(ports[:n]))
		ports = ports[n:]
	}
	return groups
}

// dnsRules are the DNS chain's rules and the jump to it: queries (UDP and
// TCP port 53) to resolver go to to. A resolver of length 0 (0.0.0.0/0)
// matches every destination, so the rules name none.
func dnsRules(resolver netip.Prefix, to netip.AddrPort) []string {
	dest := ""
	if resolver.Bits() > 0 {
		dest = " -d " + resolver.String()
	}
	var out []string
	for _, proto := range []string{"udp", "tcp"} {
		out = append(out, fmt.Sprintf("-A %s -p %s%s --dport 53 -j DNAT --to-destination %s", DNSChain, proto, dest, to))
	}
	return append(out, "-A OUTPUT -j "+DNSChain)
}
