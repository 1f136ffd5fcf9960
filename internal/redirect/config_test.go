package redirect

import (
	"errors"
	"testing"
)

func TestValidateRefusesNamingTheFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"inbound port 0", func(c *Config) { c.ProxyInboundPort = 0 }, "--proxy-inbound-port: 0 is not a port: use 1 to 65535"},
		{"outbound port too high", func(c *Config) { c.ProxyOutboundPort = 65536 }, "--proxy-outbound-port: 65536 is not a port: use 1 to 65535"},
		{"one port for both", func(c *Config) { c.ProxyOutboundPort = 15000 }, "--proxy-outbound-port: 15000 is also the proxy's inbound port: the proxy needs two ports"},
		{"negative uid", func(c *Config) { c.ProxyUID = -1 }, "--proxy-uid: -1 is not a user or group id: use 0 to 4294967294"},
		{"gid -1 as unsigned", func(c *Config) { c.ProxyGID = 1<<32 - 1 }, "--proxy-gid: 4294967295 is not a user or group id: use 0 to 4294967294"},
		{"excluded uid", func(c *Config) { c.ExcludeUIDs = []int{0, -5} }, "--exclude-uid: -5 is not a user or group id: use 0 to 4294967294"},
		{"app port out of range", func(c *Config) { c.AppPorts = []int{8080, 70000} }, "--app-port: 70000 is not a port: use 1 to 65535"},
		{"app port 0", func(c *Config) { c.AppPorts = []int{0} }, "--app-port: 0 is not a port: use 1 to 65535"},
		{"app port is the proxy's inbound", func(c *Config) { c.AppPorts = []int{15000} },
			"--app-port: 15000 is the proxy's inbound port (--proxy-inbound-port): the app and the proxy cannot share it"},
		{"app port is the proxy's outbound", func(c *Config) { c.AppPorts = []int{15001} },
			"--app-port: 15001 is the proxy's outbound port (--proxy-outbound-port): the app and the proxy cannot share it"},
		{"all and ports", func(c *Config) { c.AllInbound, c.AppPorts = true, []int{8080, 9090} },
			"--app-port: all redirects every port: give it alone, not with ports 8080,9090"},
		{"excluded inbound port without all", func(c *Config) { c.AppPorts, c.ExcludeInboundPorts = []int{8080}, []int{22} },
			"--exclude-inbound-port: only with --app-port all: with a list of app ports, leave the port out of the list"},
		{"excluded inbound port out of range", func(c *Config) { c.AppPorts, c.AllInbound, c.ExcludeInboundPorts = nil, true, []int{-1} },
			"--exclude-inbound-port: -1 is not a port: use 1 to 65535"},
		{"excluded outbound port out of range", func(c *Config) { c.ExcludeOutboundPorts = []int{22, 65536} },
			"--exclude-outbound-port: 65536 is not a port: use 1 to 65535"},
		{"unparsable CIDR", func(c *Config) { c.ExcludeOutboundCIDRs = []string{"10.0.0.0/33"} },
			`--exclude-outbound-cidr: "10.0.0.0/33" is not a CIDR (10.0.0.0/8, fd00::/8) or an IP address`},
		{"a name, not a CIDR", func(c *Config) { c.ExcludeOutboundCIDRs = []string{"metadata.internal"} },
			`--exclude-outbound-cidr: "metadata.internal" is not a CIDR (10.0.0.0/8, fd00::/8) or an IP address`},
		{"empty CIDR", func(c *Config) { c.ExcludeOutboundCIDRs = []string{""} },
			`--exclude-outbound-cidr: "" is not a CIDR (10.0.0.0/8, fd00::/8) or an IP address`},
		{"host bits set", func(c *Config) { c.ExcludeOutboundCIDRs = []string{"10.1.2.3/8"} },
			`--exclude-outbound-cidr: "10.1.2.3/8" has bits set past its length: did you mean 10.0.0.0/8?`},
		{"IPv6 CIDR without IPv6", func(c *Config) { c.ExcludeOutboundCIDRs = []string{"fd00::/8"} },
			"--exclude-outbound-cidr: fd00::/8 is an IPv6 CIDR, and IPv6 is not redirected: give --ipv6 too, or leave it out"},
		{"IPv4-mapped CIDR", func(c *Config) { c.IPv6, c.ExcludeOutboundCIDRs = true, []string{"::ffff:10.0.0.0/104"} },
			`--exclude-outbound-cidr: "::ffff:10.0.0.0/104" is an IPv4-mapped IPv6 CIDR: write it as IPv4`},
		{"resolver alone", func(c *Config) { c.DNSResolver = "10.0.0.2" },
			"--dns-redirect-to: required with --dns-resolver: the ADDR:PORT of the DNS server queries go to"},
		{"redirect alone", func(c *Config) { c.DNSRedirectTo = "127.0.0.1:8600" },
			"--dns-resolver: required with --dns-redirect-to: the address whose queries are redirected"},
		{"resolver not an address", func(c *Config) { c.DNSResolver, c.DNSRedirectTo = "dns.local", "127.0.0.1:8600" },
			`--dns-resolver: "dns.local" is not an IP address or a CIDR (10.0.0.2, 0.0.0.0/0 for every resolver)`},
		{"redirect without a port", func(c *Config) { c.DNSResolver, c.DNSRedirectTo = "10.0.0.2", "127.0.0.1" },
			`--dns-redirect-to: "127.0.0.1" is not an ADDR:PORT (10.0.0.1:8600, [fd00::1]:8600)`},
		{"redirect to port 0", func(c *Config) { c.DNSResolver, c.DNSRedirectTo = "10.0.0.2", "127.0.0.1:0" },
			"--dns-redirect-to: 0 is not a port: use 1 to 65535"},
		{"DNS across families", func(c *Config) { c.IPv6, c.DNSResolver, c.DNSRedirectTo = true, "10.0.0.2", "[::1]:8600" },
			"--dns-redirect-to: [::1]:8600 is not of the family of --dns-resolver 10.0.0.2: a query cannot change IP version"},
		{"IPv6 resolver without IPv6", func(c *Config) { c.DNSResolver, c.DNSRedirectTo = "fd00::2", "[::1]:8600" },
			"--dns-resolver: fd00::2 is an IPv6 address, and IPv6 is not redirected: give --ipv6 too"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := seedConfig()
			tc.edit(&cfg)
			err := cfg.Validate()
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			var fe *FieldError
			if !errors.Is(err, ErrConfig) || !errors.As(err, &fe) {
				t.Fatalf("%v is not a *FieldError wrapping ErrConfig", err)
			}
			if rules, err := Rules(cfg, IPv4); err == nil || rules != nil {
				t.Fatalf("Rules wrote %q for a refused configuration", rules)
			}
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
	}{
		{"the defaults", func(*Config) {}},
		{"the ends of the port range", func(c *Config) { c.ProxyInboundPort, c.ProxyOutboundPort, c.AppPorts = 1, 65535, []int{2, 65534} }},
		{"root excluded", func(c *Config) { c.ExcludeUIDs = []int{0} }},
		{"an address as a CIDR", func(c *Config) { c.ExcludeOutboundCIDRs = []string{"10.0.0.1", "0.0.0.0/0"} }},
		{"IPv6 CIDRs with IPv6", func(c *Config) { c.IPv6, c.ExcludeOutboundCIDRs = true, []string{"fd00::/8", "::1"} }},
		{"all inbound but some", func(c *Config) { c.AllInbound, c.ExcludeInboundPorts = true, []int{22} }},
		{"DNS", func(c *Config) { c.DNSResolver, c.DNSRedirectTo = "10.0.0.2", "10.0.0.1:8600" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.edit(&cfg)
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
