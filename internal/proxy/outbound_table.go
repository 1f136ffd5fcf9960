package proxy

import (
	"fmt"
	"net/netip"

	pbproxy "trellis.dev/trellis/api/proxy/v1"
)

// Unknown destinations of the transparent listener, the values of
// TransparentOutbound.unknown.
const (
	UnknownPassthrough = "passthrough"
	UnknownDeny        = "deny"
)

// transparentTable maps an original destination onto the destination
// service whose endpoint listens there: the transparent listener's
// routing, computed once per snapshot.
type transparentTable struct {
	byAddr      map[netip.AddrPort]*pbproxy.Upstream
	passthrough bool
}

// newTransparentTable indexes out's destinations by their endpoints'
// app_address. An address two destinations claim, an unparsable address
// or an unknown policy is refused, naming the field.
func newTransparentTable(out *pbproxy.TransparentOutbound) (*transparentTable, error) {
	t := &transparentTable{byAddr: map[netip.AddrPort]*pbproxy.Upstream{}}
	switch out.GetUnknown() {
	case UnknownPassthrough:
		t.passthrough = true
	case "", UnknownDeny:
	default:
		return nil, fmt.Errorf("outbound.unknown: %q is not passthrough or deny", out.GetUnknown())
	}
	for i, d := range out.GetDestinations() {
		for j, ep := range d.GetEndpoints() {
			field := fmt.Sprintf("outbound.destinations[%d].endpoints[%d].app_address", i, j)
			ap, err := netip.ParseAddrPort(ep.GetAppAddress())
			if err != nil {
				return nil, fmt.Errorf("%s: %q is not an ip:port", field, ep.GetAppAddress())
			}
			ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			if prev, ok := t.byAddr[ap]; ok && prev != d {
				return nil, fmt.Errorf("%s: %s is also an endpoint of %s/%s", field, ap, prev.GetNamespace(), prev.GetService())
			}
			t.byAddr[ap] = d
		}
	}
	return t, nil
}

// route is where a connection to dst goes: a destination service, or
// none, with passthrough saying whether to connect to dst directly.
func (t *transparentTable) route(dst netip.AddrPort) (up *pbproxy.Upstream, passthrough bool) {
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if up, ok := t.byAddr[dst]; ok {
		return up, false
	}
	return nil, t.passthrough
}
