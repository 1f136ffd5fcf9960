package agent

import (
	"net/netip"
	"slices"
	"testing"

	"trellis.dev/trellis/internal/redirect"
)

// The redirect of a transparent mesh task: seed 004's defaults, with the
// agent's DNS redirect when the agent serves DNS in the namespace, so
// that Apply keeps the chain ApplyDNS would write.
func TestTransparentRedirect(t *testing.T) {
	for _, tc := range []struct {
		name         string
		dnsTo        netip.AddrPort
		resolver, to string
	}{
		{name: "no DNS"},
		{name: "the agent's DNS", dnsTo: netip.MustParseAddrPort("127.0.0.1:8600"), resolver: "0.0.0.0/0", to: "127.0.0.1:8600"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := transparentRedirect(tc.dnsTo)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			if c.ProxyOutboundPort != 15001 || c.ProxyUID != 1337 || c.ProxyGID != 1337 ||
				len(c.AppPorts) != 0 || c.AllInbound || !slices.Equal(c.ExcludeOutboundCIDRs, []string{redirect.DefaultMetadataCIDR}) {
				t.Errorf("config %+v", c)
			}
			if c.DNSResolver != tc.resolver || c.DNSRedirectTo != tc.to {
				t.Errorf("DNS %q -> %q, want %q -> %q", c.DNSResolver, c.DNSRedirectTo, tc.resolver, tc.to)
			}
		})
	}
}
