package redirect

import (
	"slices"
	"strings"
	"testing"
)

// seed004 is seed 004's script, with Trellis's chain names
// (APPMESH_INGRESS → TRELLIS_INBOUND, APPMESH_EGRESS → TRELLIS_OUTBOUND),
// for APPMESH_APP_PORTS=8080, APPMESH_IGNORE_UID=1337,
// APPMESH_IGNORE_GID=1337, APPMESH_EGRESS_IGNORED_PORTS=22,
// APPMESH_EGRESS_IGNORED_IP=169.254.169.254 and the proxy's ports 15000
// and 15001, in the script's order, as iptables-restore lines:
var seed004 = []string{
	"*nat",
	":TRELLIS_INBOUND - [0:0]", // iptables -t nat -N APPMESH_INGRESS
	":TRELLIS_OUTBOUND - [0:0]",
	"-A TRELLIS_OUTBOUND -m owner --uid-owner 1337 -j RETURN",
	"-A TRELLIS_OUTBOUND -m owner --gid-owner 1337 -j RETURN",
	"-A TRELLIS_OUTBOUND -p tcp -m multiport --dports 22 -j RETURN",
	"-A TRELLIS_OUTBOUND -p tcp -d 169.254.169.254/32 -j RETURN",
	"-A TRELLIS_OUTBOUND -p tcp -j REDIRECT --to-ports 15001",
	"-A OUTPUT -p tcp -m addrtype ! --dst-type LOCAL -j TRELLIS_OUTBOUND",
	"-A TRELLIS_INBOUND -p tcp -m multiport --dports 8080 -j REDIRECT --to-ports 15000",
	"-A PREROUTING -p tcp -m addrtype ! --src-type LOCAL -j TRELLIS_INBOUND",
	"COMMIT",
}

func seedConfig() Config {
	c := DefaultConfig()
	c.AppPorts = []int{8080}
	c.ExcludeOutboundPorts = []int{22}
	return c
}

func TestRules(t *testing.T) {
	// without drops the lines of seed004 that contain any of words.
	without := func(words ...string) []string {
		return slices.DeleteFunc(slices.Clone(seed004), func(l string) bool {
			for _, w := range words {
				if strings.Contains(l, w) {
					return true
				}
			}
			return false
		})
	}
	// replace swaps one line of seed004 for others.
	replace := func(old string, new ...string) []string {
		i := slices.Index(seed004, old)
		if i < 0 {
			t.Fatalf("seed004 has no line %q", old)
		}
		return slices.Concat(seed004[:i], new, seed004[i+1:])
	}
	for _, tc := range []struct {
		name   string
		edit   func(*Config)
		family Family
		want   []string
	}{
		{"seed 004", func(*Config) {}, IPv4, seed004},
		{"no app ports: no inbound chain (the seed without APPMESH_APP_PORTS)",
			func(c *Config) { c.AppPorts = nil }, IPv4, without("INBOUND")},
		{"the defaults: no excluded port", func(c *Config) { c.ExcludeOutboundPorts = nil }, IPv4, without("--dports 22")},
		{"no excluded CIDR", func(c *Config) { c.ExcludeOutboundCIDRs = nil }, IPv4, without("169.254.169.254")},
		{"other ports and ids", func(c *Config) {
			c.ProxyInboundPort, c.ProxyOutboundPort, c.ProxyUID, c.ProxyGID = 20000, 20001, 101, 102
		}, IPv4, []string{
			"*nat",
			":TRELLIS_INBOUND - [0:0]",
			":TRELLIS_OUTBOUND - [0:0]",
			"-A TRELLIS_OUTBOUND -m owner --uid-owner 101 -j RETURN",
			"-A TRELLIS_OUTBOUND -m owner --gid-owner 102 -j RETURN",
			"-A TRELLIS_OUTBOUND -p tcp -m multiport --dports 22 -j RETURN",
			"-A TRELLIS_OUTBOUND -p tcp -d 169.254.169.254/32 -j RETURN",
			"-A TRELLIS_OUTBOUND -p tcp -j REDIRECT --to-ports 20001",
			"-A OUTPUT -p tcp -m addrtype ! --dst-type LOCAL -j TRELLIS_OUTBOUND",
			"-A TRELLIS_INBOUND -p tcp -m multiport --dports 8080 -j REDIRECT --to-ports 20000",
			"-A PREROUTING -p tcp -m addrtype ! --src-type LOCAL -j TRELLIS_INBOUND",
			"COMMIT",
		}},
		{"several ports, CIDRs and users, each once", func(c *Config) {
			c.AppPorts = []int{8080, 9090, 8080}
			c.ExcludeOutboundPorts = []int{22, 5432, 22}
			c.ExcludeOutboundCIDRs = []string{"169.254.169.254", "10.0.0.0/8", "10.0.0.0/8"}
			c.ExcludeUIDs = []int{0, 1337, 0}
		}, IPv4, []string{
			"*nat",
			":TRELLIS_INBOUND - [0:0]",
			":TRELLIS_OUTBOUND - [0:0]",
			"-A TRELLIS_OUTBOUND -m owner --uid-owner 1337 -j RETURN",
			"-A TRELLIS_OUTBOUND -m owner --gid-owner 1337 -j RETURN",
			"-A TRELLIS_OUTBOUND -m owner --uid-owner 0 -j RETURN",
			"-A TRELLIS_OUTBOUND -p tcp -m multiport --dports 22,5432 -j RETURN",
			"-A TRELLIS_OUTBOUND -p tcp -d 169.254.169.254/32 -j RETURN",
			"-A TRELLIS_OUTBOUND -p tcp -d 10.0.0.0/8 -j RETURN",
			"-A TRELLIS_OUTBOUND -p tcp -j REDIRECT --to-ports 15001",
			"-A OUTPUT -p tcp -m addrtype ! --dst-type LOCAL -j TRELLIS_OUTBOUND",
			"-A TRELLIS_INBOUND -p tcp -m multiport --dports 8080,9090 -j REDIRECT --to-ports 15000",
			"-A PREROUTING -p tcp -m addrtype ! --src-type LOCAL -j TRELLIS_INBOUND",
			"COMMIT",
		}},
		{"more ports than one multiport match takes", func(c *Config) {
			c.AppPorts = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
		}, IPv4, replace("-A TRELLIS_INBOUND -p tcp -m multiport --dports 8080 -j REDIRECT --to-ports 15000",
			"-A TRELLIS_INBOUND -p tcp -m multiport --dports 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15 -j REDIRECT --to-ports 15000",
			"-A TRELLIS_INBOUND -p tcp -m multiport --dports 16 -j REDIRECT --to-ports 15000")},
		{"all inbound ports but the excluded", func(c *Config) {
			c.AppPorts, c.AllInbound, c.ExcludeInboundPorts = nil, true, []int{22, 9901}
		}, IPv4, replace("-A TRELLIS_INBOUND -p tcp -m multiport --dports 8080 -j REDIRECT --to-ports 15000",
			"-A TRELLIS_INBOUND -p tcp -m multiport --dports 22,9901 -j RETURN",
			"-A TRELLIS_INBOUND -p tcp -j REDIRECT --to-ports 15000")},
		{"all inbound ports", func(c *Config) { c.AppPorts, c.AllInbound = nil, true }, IPv4,
			replace("-A TRELLIS_INBOUND -p tcp -m multiport --dports 8080 -j REDIRECT --to-ports 15000",
				"-A TRELLIS_INBOUND -p tcp -j REDIRECT --to-ports 15000")},
		{"DNS to the resolver, before the outbound jump", func(c *Config) {
			c.DNSResolver, c.DNSRedirectTo = "10.0.0.2", "127.0.0.1:8600"
		}, IPv4, slices.Concat(seed004[:3], []string{
			":TRELLIS_DNS - [0:0]",
			"-A TRELLIS_DNS -p udp -d 10.0.0.2/32 --dport 53 -j DNAT --to-destination 127.0.0.1:8600",
			"-A TRELLIS_DNS -p tcp -d 10.0.0.2/32 --dport 53 -j DNAT --to-destination 127.0.0.1:8600",
			"-A OUTPUT -j TRELLIS_DNS",
		}, seed004[3:])},
		{"DNS to every resolver", func(c *Config) {
			c.DNSResolver, c.DNSRedirectTo = "0.0.0.0/0", "127.0.0.1:8600"
		}, IPv4, slices.Concat(seed004[:3], []string{
			":TRELLIS_DNS - [0:0]",
			"-A TRELLIS_DNS -p udp --dport 53 -j DNAT --to-destination 127.0.0.1:8600",
			"-A TRELLIS_DNS -p tcp --dport 53 -j DNAT --to-destination 127.0.0.1:8600",
			"-A OUTPUT -j TRELLIS_DNS",
		}, seed004[3:])},
		{"IPv6 keeps the IPv6 CIDRs and resolver", func(c *Config) {
			c.IPv6 = true
			c.ExcludeOutboundCIDRs = []string{"169.254.169.254/32", "fd00:ec2::254", "2001:db8::/32"}
			c.DNSResolver, c.DNSRedirectTo = "fd00::2", "[::1]:8600"
		}, IPv6, slices.Concat(seed004[:3], []string{
			":TRELLIS_DNS - [0:0]",
			"-A TRELLIS_DNS -p udp -d fd00::2/128 --dport 53 -j DNAT --to-destination [::1]:8600",
			"-A TRELLIS_DNS -p tcp -d fd00::2/128 --dport 53 -j DNAT --to-destination [::1]:8600",
			"-A OUTPUT -j TRELLIS_DNS",
		}, seed004[3:6], []string{
			"-A TRELLIS_OUTBOUND -p tcp -d fd00:ec2::254/128 -j RETURN",
			"-A TRELLIS_OUTBOUND -p tcp -d 2001:db8::/32 -j RETURN",
		}, seed004[7:])},
		{"IPv4 leaves the IPv6 CIDRs and resolver out", func(c *Config) {
			c.IPv6 = true
			c.ExcludeOutboundCIDRs = []string{"169.254.169.254/32", "fd00:ec2::254"}
			c.DNSResolver, c.DNSRedirectTo = "fd00::2", "[::1]:8600"
		}, IPv4, seed004},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := seedConfig()
			tc.edit(&cfg)
			got, err := Rules(cfg, tc.family)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// The defaults are seed 004's, without app ports or excluded ports.
func TestDefaultConfig(t *testing.T) {
	got, err := Rules(DefaultConfig(), IPv4)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"*nat",
		":TRELLIS_OUTBOUND - [0:0]",
		"-A TRELLIS_OUTBOUND -m owner --uid-owner 1337 -j RETURN",
		"-A TRELLIS_OUTBOUND -m owner --gid-owner 1337 -j RETURN",
		"-A TRELLIS_OUTBOUND -p tcp -d 169.254.169.254/32 -j RETURN",
		"-A TRELLIS_OUTBOUND -p tcp -j REDIRECT --to-ports 15001",
		"-A OUTPUT -p tcp -m addrtype ! --dst-type LOCAL -j TRELLIS_OUTBOUND",
		"COMMIT",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
