package tasknet

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
)

// The conflist the agent writes, exactly: reviewed as a whole.
func TestConflist(t *testing.T) {
	got, err := Conflist(DefaultConfig("/var/lib/trellis/network"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "cniVersion": "1.0.0",
  "name": "trellis",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "trellis0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "/var/lib/trellis/network/ipam",
        "ranges": [
          [
            {
              "subnet": "172.26.64.0/20",
              "gateway": "172.26.64.1"
            }
          ]
        ],
        "routes": [
          {
            "dst": "0.0.0.0/0"
          }
        ]
      }
    },
    {
      "type": "firewall",
      "backend": "iptables",
      "iptablesAdminChainName": "TRELLIS-ADMIN"
    },
    {
      "type": "portmap",
      "capabilities": {
        "portMappings": true
      },
      "snat": true
    }
  ]
}`
	if string(got) != want {
		t.Fatalf("conflist:\n%s\nwant:\n%s", got, want)
	}
}

func TestConflistWithARange(t *testing.T) {
	c := DefaultConfig("/d")
	c.Bridge, c.Subnet = "tasks1", netip.MustParsePrefix("10.99.0.0/24")
	c.RangeStart, c.RangeEnd = netip.MustParseAddr("10.99.0.128"), netip.MustParseAddr("10.99.0.254")
	b, err := Conflist(c)
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		Plugins []struct {
			Bridge string
			IPAM   struct {
				Ranges [][]map[string]string
			}
		}
	}
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	r := l.Plugins[0].IPAM.Ranges[0][0]
	if l.Plugins[0].Bridge != "tasks1" || r["subnet"] != "10.99.0.0/24" || r["rangeStart"] != "10.99.0.128" || r["rangeEnd"] != "10.99.0.254" || r["gateway"] != "10.99.0.1" {
		t.Fatalf("bridge %q range %v", l.Plugins[0].Bridge, r)
	}
}

func TestLoopbackConf(t *testing.T) {
	if got := string(LoopbackConf()); got != `{"cniVersion":"1.0.0","name":"trellis-lo","type":"loopback"}` {
		t.Fatal(got)
	}
}

// Each refusal names the flag and says why.
func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig("/data")
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   string // "" for valid
	}{
		{"default", func(*Config) {}, ""},
		{"bridge with a slash", func(c *Config) { c.Bridge = "br/0" }, `-bridge-name: "br/0" is not an interface name`},
		{"bridge too long", func(c *Config) { c.Bridge = "abcdefghijklmnop" }, `-bridge-name: "abcdefghijklmnop" is not an interface name`},
		{"no subnet", func(c *Config) { c.Subnet = netip.Prefix{} }, "-bridge-subnet: none given"},
		{"IPv6", func(c *Config) { c.Subnet = netip.MustParsePrefix("fd00::/64") }, "-bridge-subnet: fd00::/64 is not IPv4"},
		{"host bits", func(c *Config) { c.Subnet = netip.MustParsePrefix("10.1.2.3/24") }, "-bridge-subnet: 10.1.2.3/24 is not a network address: did you mean 10.1.2.0/24?"},
		{"too small", func(c *Config) { c.Subnet = netip.MustParsePrefix("10.1.2.0/30") }, "-bridge-subnet: 10.1.2.0/30 is too small"},
		{"too large", func(c *Config) { c.Subnet = netip.MustParsePrefix("0.0.0.0/0") }, "-bridge-subnet: 0.0.0.0/0 is too large"},
		{"loopback", func(c *Config) { c.Subnet = netip.MustParsePrefix("127.1.0.0/16") }, "-bridge-subnet: 127.1.0.0/16 is in a reserved range"},
		{"link-local", func(c *Config) { c.Subnet = netip.MustParsePrefix("169.254.0.0/16") }, "-bridge-subnet: 169.254.0.0/16 is in a reserved range"},
		{"multicast", func(c *Config) { c.Subnet = netip.MustParsePrefix("224.1.0.0/16") }, "is in a reserved range"},
		{"range half", func(c *Config) { c.RangeStart = netip.MustParseAddr("172.26.64.10") }, "-bridge-subnet: a range needs both its start and its end"},
		{"range outside", func(c *Config) {
			c.RangeStart, c.RangeEnd = netip.MustParseAddr("172.26.64.10"), netip.MustParseAddr("172.26.99.1")
		}, "-bridge-subnet: the range 172.26.64.10-172.26.99.1 is not inside 172.26.64.0/20"},
		{"range reversed", func(c *Config) {
			c.RangeStart, c.RangeEnd = netip.MustParseAddr("172.26.64.10"), netip.MustParseAddr("172.26.64.9")
		}, "ends before it starts"},
		{"range over the gateway", func(c *Config) {
			c.RangeStart, c.RangeEnd = netip.MustParseAddr("172.26.64.1"), netip.MustParseAddr("172.26.64.9")
		}, "holds the bridge's address 172.26.64.1"},
		{"no plugin dir", func(c *Config) { c.PluginDirs = nil }, "-cni-plugin-dir: none given"},
		{"relative plugin dir", func(c *Config) { c.PluginDirs = []string{"cni"} }, `-cni-plugin-dir: "cni" is not an absolute path`},
		{"relative data dir", func(c *Config) { c.DataDir = "data" }, `-data-dir: "data" is not an absolute path`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			c.PluginDirs = append([]string(nil), ok.PluginDirs...)
			tc.mutate(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if tc.want != "" {
				if _, err := Conflist(c); err == nil {
					t.Fatal("Conflist wrote a refused configuration")
				}
			}
		})
	}
}

func TestCheckSubnet(t *testing.T) {
	c := DefaultConfig("/d")
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		name string
		host []HostNet
		want string
	}{
		{"nothing near", []HostNet{
			{Prefix: p("10.0.2.15/24"), Interface: "eth0"},
			{Prefix: p("10.0.2.0/24"), Interface: "eth0", Route: true},
			{Prefix: p("0.0.0.0/0"), Interface: "eth0", Route: true},
			{Prefix: p("172.17.0.1/16"), Interface: "docker0"},
			{Prefix: p("127.0.0.1/8"), Interface: "lo"},
			{Prefix: p("fe80::1/64"), Interface: "eth0"},
		}, ""},
		{"the bridge's own", []HostNet{
			{Prefix: p("172.26.64.1/20"), Interface: "trellis0"},
			{Prefix: p("172.26.64.0/20"), Interface: "trellis0", Route: true},
		}, ""},
		{"an address inside", []HostNet{{Prefix: p("172.26.70.5/24"), Interface: "eth1"}},
			"-bridge-subnet: 172.26.64.0/20 overlaps the host's address 172.26.70.5/24 on eth1: choose another private subnet with -bridge-subnet"},
		{"a wider route", []HostNet{{Prefix: p("172.16.0.0/12"), Interface: "wg0", Route: true}, {Prefix: p("172.16.0.0/12"), Interface: "wg0", Route: true}},
			"overlaps the host's route to 172.16.0.0/12 on wg0: choose"},
		{"another bridge with our subnet", []HostNet{{Prefix: p("172.26.64.1/20"), Interface: "br-old"}},
			"overlaps the host's address 172.26.64.1/20 on br-old"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckSubnet(c, tc.host)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestCheckPorts(t *testing.T) {
	for _, tc := range []struct {
		ports []Port
		want  string
	}{
		{[]Port{{Name: "http", ContainerPort: 8080}, {ContainerPort: 8080, Protocol: UDP}, {ContainerPort: 53, HostPort: 53, Protocol: UDP}, {ContainerPort: 54, HostPort: 53}}, ""},
		{[]Port{{ContainerPort: 70000}}, "ports[0].container_port: 70000 is not a port: use 1 to 65535"},
		{[]Port{{ContainerPort: 80, HostPort: -1}}, "ports[0].host_port: -1 is not a port: use 1 to 65535, or 0 for one the agent picks"},
		{[]Port{{ContainerPort: 80, Protocol: "sctp"}}, `ports[0].protocol: "sctp" is neither tcp nor udp`},
		{[]Port{{ContainerPort: 80}, {ContainerPort: 80, Protocol: TCP}}, "ports[1].container_port: 80/tcp is also ports[0]'s"},
		{[]Port{{ContainerPort: 80, HostPort: 8080}, {ContainerPort: 81, HostPort: 8080}}, "ports[1].host_port: 8080/tcp is also ports[0]'s"},
		{[]Port{{Name: "web", ContainerPort: 80}, {Name: "web", ContainerPort: 81}}, `ports[1].name: "web" is also the name of ports[0]`},
		{[]Port{{Name: "Web_1", ContainerPort: 80}}, `ports[0].name: "Web_1" is not a name (lower-case letters, digits and '-', at most 63)`},
	} {
		err := CheckPorts(tc.ports)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v refused: %v", tc.ports, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%+v: got %v, want %q", tc.ports, err, tc.want)
		}
	}
}

func TestCapabilityArgs(t *testing.T) {
	if c, err := capabilityArgs(nil); c != nil || err != nil {
		t.Fatalf("no ports: %v %v", c, err)
	}
	c, err := capabilityArgs([]Port{{ContainerPort: 8080, HostPort: 31000}, {ContainerPort: 53, HostPort: 31001, Protocol: UDP}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(c)
	if want := `{"portMappings":[{"hostPort":31000,"containerPort":8080,"protocol":"tcp"},{"hostPort":31001,"containerPort":53,"protocol":"udp"}]}`; string(b) != want {
		t.Fatalf("%s\nwant %s", b, want)
	}
	if _, err := capabilityArgs([]Port{{ContainerPort: 80}}); err == nil || err.Error() != "ports[0].host_port: not chosen yet" {
		t.Fatalf("unchosen port: %v", err)
	}
}

func TestSplitRange(t *testing.T) {
	s := netip.MustParsePrefix("172.26.64.0/20")
	for _, tc := range []struct {
		i, n       int
		start, end string
	}{
		{0, 1, "172.26.64.2", "172.26.79.254"},
		{0, 3, "172.26.64.2", "172.26.69.85"},
		{1, 3, "172.26.69.86", "172.26.74.169"},
		{2, 3, "172.26.74.170", "172.26.79.254"},
	} {
		a, b, err := SplitRange(s, tc.i, tc.n)
		if err != nil || a.String() != tc.start || b.String() != tc.end {
			t.Errorf("part %d of %d: %s-%s %v, want %s-%s", tc.i, tc.n, a, b, err, tc.start, tc.end)
		}
		c := DefaultConfig("/d")
		c.RangeStart, c.RangeEnd = a, b
		if err := c.Validate(); err != nil {
			t.Errorf("part %d of %d does not validate: %v", tc.i, tc.n, err)
		}
	}
	if _, _, err := SplitRange(netip.MustParsePrefix("10.0.0.0/29"), 0, 10); err == nil {
		t.Fatal("10 agents in a /29")
	}
}

func TestParseRoutes(t *testing.T) {
	text := "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
		"eth0\t00000000\t0102000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n" +
		"eth0\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n" +
		"docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"
	rs, err := parseRoutes(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, r.String())
	}
	if want := "route to 0.0.0.0/0 on eth0,route to 10.0.2.0/24 on eth0,route to 172.17.0.0/16 on docker0"; strings.Join(got, ",") != want {
		t.Fatalf("%v\nwant %s", got, want)
	}
	if _, err := parseRoutes(strings.NewReader("h\neth0\tXYZ\t0\t0\t0\t0\t0\t00000000\n")); err == nil {
		t.Fatal("a bad destination parsed")
	}
}

func TestEffectiveCaps(t *testing.T) {
	caps, err := effectiveCaps("Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n")
	if err != nil || caps != 0x1ffffffffff {
		t.Fatalf("%x %v", caps, err)
	}
	if _, err := effectiveCaps("Name:\tx\n"); err == nil {
		t.Fatal("no CapEff line")
	}
}

// Probe names what is missing and how to install it.
func TestProbeWithoutPlugins(t *testing.T) {
	c := DefaultConfig("/d")
	c.PluginDirs = []string{t.TempDir()}
	err := Probe(c)
	if err == nil || !strings.Contains(err.Error(), "the CNI plugins bridge, host-local, firewall, portmap, loopback are not in "+c.PluginDirs[0]+": install them ("+InstallHint+")") {
		t.Fatalf("%v", err)
	}
}
