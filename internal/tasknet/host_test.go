package tasknet

import (
	"net/netip"
	"testing"
)

// The host's own networks are read, in the caller's namespace: a test
// host has only what the test gave it.
func TestHostNetworks(t *testing.T) {
	h := newTestHost(t)
	h.run("ip", "link", "add", "tdummy0", "type", "veth", "peer", "name", "tdummy1")
	h.run("ip", "addr", "add", "10.123.4.5/24", "dev", "tdummy0")
	h.run("ip", "link", "set", "tdummy0", "up")
	var nets []HostNet
	h.do(func() (err error) { nets, err = HostNetworks(); return err })
	var addr, route bool
	for _, n := range nets {
		addr = addr || (n == HostNet{Prefix: netip.MustParsePrefix("10.123.4.5/24"), Interface: "tdummy0"})
		route = route || (n == HostNet{Prefix: netip.MustParsePrefix("10.123.4.0/24"), Interface: "tdummy0", Route: true})
	}
	if !addr || !route {
		t.Fatalf("%v: want tdummy0's address and route", nets)
	}
	c := DefaultConfig("/d")
	c.Subnet = netip.MustParsePrefix("10.123.0.0/16")
	if err := CheckSubnet(c, nets); err == nil {
		t.Fatal("an overlapping subnet passed")
	}
}
