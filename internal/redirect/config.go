package redirect

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// The defaults, seed 004's: the proxy listens for inbound traffic on
// 15000 and for redirected outbound traffic on 15001, runs as UID and GID
// 1337, and the instance metadata address is never redirected.
const (
	DefaultProxyInboundPort  = 15000
	DefaultProxyOutboundPort = 15001
	DefaultProxyUID          = 1337
	DefaultProxyGID          = 1337
	DefaultMetadataCIDR      = "169.254.169.254/32"
)

// Config is what to redirect in one network namespace. Each field names
// the flag of `trellis connect redirect-traffic` that sets it, and the
// errors of Validate name that flag.
type Config struct {
	// ProxyInboundPort (--proxy-inbound-port) receives TCP sent from
	// outside the namespace to AppPorts.
	ProxyInboundPort int
	// ProxyOutboundPort (--proxy-outbound-port) receives TCP the namespace
	// sends to any address that is not its own.
	ProxyOutboundPort int
	// ProxyUID and ProxyGID (--proxy-uid, --proxy-gid): the proxy's own
	// outbound connections are not redirected, or they would loop back to
	// it.
	ProxyUID int
	ProxyGID int
	// ExcludeUIDs (--exclude-uid): other users whose outbound connections
	// bypass the proxy.
	ExcludeUIDs []int
	// AppPorts (--app-port) are the ports the app listens on; TCP to them
	// from outside the namespace goes to ProxyInboundPort. Empty with
	// AllInbound false: inbound traffic is not redirected (seed 004
	// without APPMESH_APP_PORTS).
	AppPorts []int
	// AllInbound (--app-port all) redirects every inbound TCP port but
	// those of ExcludeInboundPorts.
	AllInbound bool
	// ExcludeInboundPorts (--exclude-inbound-port): inbound ports left
	// alone when AllInbound is set.
	ExcludeInboundPorts []int
	// ExcludeOutboundPorts (--exclude-outbound-port): destination ports
	// that bypass the proxy.
	ExcludeOutboundPorts []int
	// ExcludeOutboundCIDRs (--exclude-outbound-cidr): destinations that
	// bypass the proxy, as CIDRs or single addresses, IPv4 or IPv6.
	ExcludeOutboundCIDRs []string
	// DNSResolver and DNSRedirectTo (--dns-resolver, --dns-redirect-to):
	// when both are set, DNS queries (UDP and TCP port 53) sent to the
	// resolver (an address, or a CIDR: 0.0.0.0/0 for every resolver) go
	// to DNSRedirectTo (ADDR:PORT) instead, the agent's DNS server. Off
	// when both are empty.
	DNSResolver   string
	DNSRedirectTo string
	// IPv6 (--ipv6) writes the IPv6 rules too, with ip6tables, in a
	// namespace that has an IPv6 address.
	IPv6 bool
}

// DefaultConfig is seed 004's configuration: the proxy's ports, user and
// group, the metadata address excluded, no inbound redirection.
func DefaultConfig() Config {
	return Config{
		ProxyInboundPort:     DefaultProxyInboundPort,
		ProxyOutboundPort:    DefaultProxyOutboundPort,
		ProxyUID:             DefaultProxyUID,
		ProxyGID:             DefaultProxyGID,
		ExcludeOutboundCIDRs: []string{DefaultMetadataCIDR},
	}
}

// ErrConfig is what every refusal of Validate wraps.
var ErrConfig = errors.New("invalid redirect configuration")

// FieldError is a refusal of one setting, named by its flag.
type FieldError struct {
	Flag   string // "--app-port"
	Reason string
}

func (e *FieldError) Error() string { return e.Flag + ": " + e.Reason }
func (e *FieldError) Unwrap() error { return ErrConfig }

func refuse(flag, format string, args ...any) error {
	return &FieldError{Flag: flag, Reason: fmt.Sprintf(format, args...)}
}

// Limits of what iptables and the kernel take.
const (
	maxPort = 65535
	maxID   = 1<<32 - 2 // (uid_t)-1 means "no change" to the kernel
)

// plan is a Config checked and parsed: what Rules writes from.
type plan struct {
	Config
	cidrs       []netip.Prefix
	dnsResolver netip.Prefix
	dnsTo       netip.AddrPort
}

// Validate checks a configuration, and names the flag of the first
// setting it refuses.
func (c Config) Validate() error {
	_, err := c.check()
	return err
}

func (c Config) check() (plan, error) {
	p := plan{Config: c}
	if err := checkPort("--proxy-inbound-port", c.ProxyInboundPort); err != nil {
		return p, err
	}
	if err := checkPort("--proxy-outbound-port", c.ProxyOutboundPort); err != nil {
		return p, err
	}
	if c.ProxyInboundPort == c.ProxyOutboundPort {
		return p, refuse("--proxy-outbound-port", "%d is also the proxy's inbound port: the proxy needs two ports", c.ProxyOutboundPort)
	}
	if err := checkID("--proxy-uid", c.ProxyUID); err != nil {
		return p, err
	}
	if err := checkID("--proxy-gid", c.ProxyGID); err != nil {
		return p, err
	}
	for _, uid := range c.ExcludeUIDs {
		if err := checkID("--exclude-uid", uid); err != nil {
			return p, err
		}
	}
	if c.AllInbound && len(c.AppPorts) > 0 {
		return p, refuse("--app-port", "all redirects every port: give it alone, not with ports %s", portList(c.AppPorts))
	}
	for _, port := range c.AppPorts {
		if err := checkPort("--app-port", port); err != nil {
			return p, err
		}
		switch port {
		case c.ProxyInboundPort:
			return p, refuse("--app-port", "%d is the proxy's inbound port (--proxy-inbound-port): the app and the proxy cannot share it", port)
		case c.ProxyOutboundPort:
			return p, refuse("--app-port", "%d is the proxy's outbound port (--proxy-outbound-port): the app and the proxy cannot share it", port)
		}
	}
	if len(c.ExcludeInboundPorts) > 0 && !c.AllInbound {
		return p, refuse("--exclude-inbound-port", "only with --app-port all: with a list of app ports, leave the port out of the list")
	}
	for _, port := range c.ExcludeInboundPorts {
		if err := checkPort("--exclude-inbound-port", port); err != nil {
			return p, err
		}
	}
	for _, port := range c.ExcludeOutboundPorts {
		if err := checkPort("--exclude-outbound-port", port); err != nil {
			return p, err
		}
	}
	for _, s := range c.ExcludeOutboundCIDRs {
		prefix, err := parseCIDR(s)
		if err != nil {
			return p, refuse("--exclude-outbound-cidr", "%v", err)
		}
		if prefix.Addr().Is6() && !c.IPv6 {
			return p, refuse("--exclude-outbound-cidr", "%s is an IPv6 CIDR, and IPv6 is not redirected: give --ipv6 too, or leave it out", s)
		}
		p.cidrs = append(p.cidrs, prefix)
	}
	if err := p.checkDNS(); err != nil {
		return p, err
	}
	return p, nil
}

func (p *plan) checkDNS() error {
	resolver, to, err := checkDNS(p.DNSResolver, p.DNSRedirectTo, p.IPv6)
	if err != nil {
		return err
	}
	p.dnsResolver, p.dnsTo = resolver, to
	return nil
}

// checkDNS checks the DNS option: both set or both empty (then the zero
// values). The resolver is an address or a CIDR; the server an ADDR:PORT
// of the same family.
func checkDNS(resolver, redirectTo string, ipv6 bool) (netip.Prefix, netip.AddrPort, error) {
	switch {
	case resolver == "" && redirectTo == "":
		return netip.Prefix{}, netip.AddrPort{}, nil
	case resolver == "":
		return netip.Prefix{}, netip.AddrPort{}, refuse("--dns-resolver", "required with --dns-redirect-to: the address whose queries are redirected")
	case redirectTo == "":
		return netip.Prefix{}, netip.AddrPort{}, refuse("--dns-redirect-to", "required with --dns-resolver: the ADDR:PORT of the DNS server queries go to")
	}
	prefix, err := parseCIDR(resolver)
	if err != nil {
		return netip.Prefix{}, netip.AddrPort{}, refuse("--dns-resolver", "%q is not an IP address or a CIDR (10.0.0.2, 0.0.0.0/0 for every resolver)", resolver)
	}
	to, err := netip.ParseAddrPort(redirectTo)
	if err != nil || to.Addr().Zone() != "" {
		return netip.Prefix{}, netip.AddrPort{}, refuse("--dns-redirect-to", "%q is not an ADDR:PORT (10.0.0.1:8600, [fd00::1]:8600)", redirectTo)
	}
	if err := checkPort("--dns-redirect-to", int(to.Port())); err != nil {
		return netip.Prefix{}, netip.AddrPort{}, err
	}
	toAddr := to.Addr().Unmap()
	if prefix.Addr().Is4() != toAddr.Is4() {
		return netip.Prefix{}, netip.AddrPort{}, refuse("--dns-redirect-to", "%s is not of the family of --dns-resolver %s: a query cannot change IP version", redirectTo, resolver)
	}
	if prefix.Addr().Is6() && !ipv6 {
		return netip.Prefix{}, netip.AddrPort{}, refuse("--dns-resolver", "%s is an IPv6 address, and IPv6 is not redirected: give --ipv6 too", resolver)
	}
	return prefix, netip.AddrPortFrom(toAddr, to.Port()), nil
}

func checkPort(flag string, port int) error {
	if port < 1 || port > maxPort {
		return refuse(flag, "%d is not a port: use 1 to %d", port, maxPort)
	}
	return nil
}

func checkID(flag string, id int) error {
	if id < 0 || id > maxID {
		return refuse(flag, "%d is not a user or group id: use 0 to %d", id, maxID)
	}
	return nil
}

// parseCIDR reads a CIDR or a single address (a /32 or /128). A CIDR with
// bits set past its length is refused rather than masked: 10.1.2.3/8
// most likely meant something other than 10.0.0.0/8.
func parseCIDR(s string) (netip.Prefix, error) {
	if addr, err := netip.ParseAddr(s); err == nil && addr.Zone() == "" {
		addr = addr.Unmap()
		return netip.PrefixFrom(addr, addr.BitLen()), nil
	}
	prefix, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR (10.0.0.0/8, fd00::/8) or an IP address", s)
	}
	if prefix.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q is an IPv4-mapped IPv6 CIDR: write it as IPv4", s)
	}
	if masked := prefix.Masked(); masked != prefix {
		return netip.Prefix{}, fmt.Errorf("%q has bits set past its length: did you mean %s?", s, masked)
	}
	return prefix, nil
}

func portList(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

// dedupe returns the values in their first order, each once.
func dedupe[T comparable](values []T) []T {
	var out []T
	for _, v := range values {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}
