package redirect

import (
	"context"
)

// DNSRedirect is the DNS option alone, without the proxy's chains: what
// the agent writes in the namespace of every bridge task, so that the
// task's queries reach the agent's DNS server whatever resolver its
// resolv.conf names. Its fields are Config's DNSResolver and
// DNSRedirectTo, and refused naming the same flags.
type DNSRedirect struct {
	// Resolver is the address, or CIDR, whose queries are redirected:
	// 0.0.0.0/0 for every one.
	Resolver string
	// To is the ADDR:PORT queries go to instead.
	To string
}

// Validate checks d as Config.Validate checks the DNS option; both fields
// are required.
func (d DNSRedirect) Validate() error {
	_, err := d.rules()
	return err
}

// rules is the restore input of the DNS chain alone, and its family.
func (d DNSRedirect) rules() (dnsPlan, error) {
	if d.Resolver == "" && d.To == "" {
		return dnsPlan{}, refuse("--dns-resolver", "required: the address whose queries are redirected")
	}
	resolver, to, err := checkDNS(d.Resolver, d.To, true)
	if err != nil {
		return dnsPlan{}, err
	}
	family := IPv4
	if resolver.Addr().Is6() {
		family = IPv6
	}
	rules := dnsRules(resolver, to)
	// The jump goes first in OUTPUT, before the proxy's outbound jump if
	// there is one: a query over TCP goes to the DNS server, not to the
	// proxy.
	rules[len(rules)-1] = "-I OUTPUT 1 -j " + DNSChain
	lines := append([]string{"*nat", ":" + DNSChain + " - [0:0]"}, rules...)
	return dnsPlan{family: family, lines: append(lines, "COMMIT")}, nil
}

type dnsPlan struct {
	family Family
	lines  []string
}

// DNSRules is the iptables-restore input that ApplyDNS writes in a
// namespace with no DNS chain yet, and the family it is for.
func DNSRules(d DNSRedirect) ([]string, Family, error) {
	p, err := d.rules()
	return p.lines, p.family, err
}

// ApplyDNS writes d's rules in the current network namespace with the
// system's iptables tools: see Tools.ApplyDNS.
func ApplyDNS(ctx context.Context, d DNSRedirect) (Result, error) { return Tools{}.ApplyDNS(ctx, d) }

// ApplyDNS writes d's rules in the nat table of the current network
// namespace, for the resolver's family, in one iptables-restore
// --noflush: the DNS chain and its jump, first in OUTPUT, replacing those
// already there. The proxy's chains, if any, are left alone; Apply with a
// Config without the DNS option removes the chain again, so whoever
// writes both gives Apply the same DNS option.
func (t Tools) ApplyDNS(ctx context.Context, d DNSRedirect) (Result, error) {
	p, err := d.rules()
	if err != nil {
		return Result{}, err
	}
	out, err := t.save(ctx, p.family)
	if err != nil {
		return Result{}, err
	}
	if err := t.restore(ctx, p.family, applyInput(p.lines, parseSave(out).only(DNSChain))); err != nil {
		return Result{}, err
	}
	return Result{Families: []Family{p.family}}, nil
}
