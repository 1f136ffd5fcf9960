package testcluster

import (
	"net"
	"strconv"
	"testing"
)

func TestParsePortRange(t *testing.T) {
	for _, c := range []struct {
		in     string
		lo, hi int
		ok     bool
	}{
		{"32768\t60999\n", 32768, 60999, true},
		{"1024 65535", 1024, 65535, true},
		{"", 0, 0, false},
		{"32768", 0, 0, false},
		{"60999 32768", 0, 0, false},
		{"a b", 0, 0, false},
		{"0 100", 0, 0, false},
		{"1000 70000", 0, 0, false},
	} {
		lo, hi, ok := parsePortRange(c.in)
		if lo != c.lo || hi != c.hi || ok != c.ok {
			t.Errorf("parsePortRange(%q) = %d, %d, %v; want %d, %d, %v", c.in, lo, hi, ok, c.lo, c.hi, c.ok)
		}
	}
}

// FreePorts hands out distinct ports that can be listened on, below the
// ephemeral range, where no outbound connection takes them.
func TestFreePortsAvoidTheEphemeralRange(t *testing.T) {
	lo, _, ok := parsePortRange(readFile("/proc/sys/net/ipv4/ip_local_port_range"))
	if !ok {
		t.Skip("no ip_local_port_range to read")
	}
	ports, err := FreePorts(30)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Errorf("port %d handed out twice", p)
		}
		seen[p] = true
		if p < minPort || p >= lo {
			t.Errorf("port %d is outside [%d, %d)", p, minPort, lo)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d: %v", p, err)
			continue
		}
		l.Close()
	}
}
