package proxy

import (
	"net/netip"
	"testing"

	pbproxy "trellis.dev/trellis/api/proxy/v1"
)

func TestTransparentTable(t *testing.T) {
	counting := &pbproxy.Upstream{Namespace: "default", Service: "counting", Endpoints: []*pbproxy.Endpoint{
		{Instance: "c1", Address: "10.0.0.1:15000", AppAddress: "10.0.0.1:9001"},
		{Instance: "c2", Address: "10.0.0.2:15000", AppAddress: "10.0.0.2:9001"},
	}}
	db := &pbproxy.Upstream{Namespace: "default", Service: "db", Endpoints: []*pbproxy.Endpoint{
		{Instance: "d1", Address: "[fd00::3]:15000", AppAddress: "[fd00::3]:5432"},
	}}
	for _, tc := range []struct {
		name        string
		unknown     string
		dst         string
		want        *pbproxy.Upstream
		passthrough bool
	}{
		{"first endpoint", "deny", "10.0.0.1:9001", counting, false},
		{"second endpoint", "deny", "10.0.0.2:9001", counting, false},
		{"IPv6", "deny", "[fd00::3]:5432", db, false},
		{"IPv4-mapped", "deny", "[::ffff:10.0.0.2]:9001", counting, false},
		{"other port", "deny", "10.0.0.1:9002", nil, false},
		{"unknown denied", "deny", "192.0.2.1:80", nil, false},
		{"unknown denied by default", "", "192.0.2.1:80", nil, false},
		{"unknown passed through", "passthrough", "192.0.2.1:80", nil, true},
		{"known, passthrough set", "passthrough", "10.0.0.1:9001", counting, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table, err := newTransparentTable(&pbproxy.TransparentOutbound{Unknown: tc.unknown, Destinations: []*pbproxy.Upstream{counting, db}})
			if err != nil {
				t.Fatal(err)
			}
			up, pass := table.route(netip.MustParseAddrPort(tc.dst))
			if up != tc.want || pass != tc.passthrough {
				t.Errorf("route(%s) = %v, %v; want %v, %v", tc.dst, up.GetService(), pass, tc.want.GetService(), tc.passthrough)
			}
		})
	}
}

func TestTransparentTableRefuses(t *testing.T) {
	ep := func(app string) *pbproxy.Endpoint {
		return &pbproxy.Endpoint{Address: "10.0.0.9:15000", AppAddress: app}
	}
	for _, tc := range []struct {
		name string
		out  *pbproxy.TransparentOutbound
		want string
	}{
		{"policy", &pbproxy.TransparentOutbound{Unknown: "drop"}, `outbound.unknown: "drop" is not passthrough or deny`},
		{"address", &pbproxy.TransparentOutbound{Destinations: []*pbproxy.Upstream{{Service: "a", Endpoints: []*pbproxy.Endpoint{ep("10.0.0.1")}}}},
			`outbound.destinations[0].endpoints[0].app_address: "10.0.0.1" is not an ip:port`},
		{"claimed twice", &pbproxy.TransparentOutbound{Destinations: []*pbproxy.Upstream{
			{Namespace: "default", Service: "a", Endpoints: []*pbproxy.Endpoint{ep("10.0.0.1:80")}},
			{Namespace: "default", Service: "b", Endpoints: []*pbproxy.Endpoint{ep("10.0.0.1:80")}},
		}}, "outbound.destinations[1].endpoints[0].app_address: 10.0.0.1:80 is also an endpoint of default/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newTransparentTable(tc.out)
			if err == nil || err.Error() != tc.want {
				t.Errorf("got %v\nwant %s", err, tc.want)
			}
		})
	}
}
