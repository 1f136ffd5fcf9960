package dns

import (
	"encoding/hex"
	"net/netip"
	"strings"
)

// Domain is the zone the interface is authoritative for.
const Domain = "trellis."

// DefaultNamespace is the namespace of a service name that names none
// (<service>.service.trellis.).
const DefaultNamespace = "default"

// Kind is what a name asks about.
type Kind int

const (
	// KindUnknown is a name of the zone that names nothing: NXDOMAIN.
	KindUnknown Kind = iota
	// KindApex is the zone itself (trellis.).
	KindApex
	// KindService is <tag>.<service>.service.<namespace>.trellis.
	KindService
	// KindInstance is <instance>.instance.trellis.
	KindInstance
	// KindAddr is <hex>.addr.trellis., an SRV record's target.
	KindAddr
)

// Name is a query name of the zone, parsed.
type Name struct {
	Kind Kind
	// Namespace, Service and Tag ("" for none) of a KindService name.
	Namespace, Service, Tag string
	// Instance is the Instance of a KindInstance name.
	Instance string
	// Addr is the address of a KindAddr name.
	Addr netip.Addr
}

// InZone reports whether name (fully qualified, any case) is in the zone.
func InZone(name string) bool {
	n := strings.ToLower(name)
	return n == Domain || strings.HasSuffix(n, "."+Domain)
}

// ParseName parses a fully qualified name of the zone, any case (DNS names
// are compared without case). A name outside the zone is KindUnknown; the
// caller checks InZone first.
func ParseName(name string) Name {
	n := strings.ToLower(name)
	if n == Domain {
		return Name{Kind: KindApex}
	}
	rest, ok := strings.CutSuffix(n, "."+Domain)
	if !ok || rest == "" {
		return Name{}
	}
	l := strings.Split(rest, ".")
	switch {
	case len(l) == 2 && l[1] == "service":
		return service("", l[0], DefaultNamespace)
	case len(l) == 3 && l[1] == "service":
		return service("", l[0], l[2])
	case len(l) == 3 && l[2] == "service":
		return service(l[0], l[1], DefaultNamespace)
	case len(l) == 4 && l[2] == "service":
		return service(l[0], l[1], l[3])
	case len(l) == 2 && l[1] == "instance" && l[0] != "":
		return Name{Kind: KindInstance, Instance: l[0]}
	case len(l) == 2 && l[1] == "addr":
		if a, ok := decodeAddr(l[0]); ok {
			return Name{Kind: KindAddr, Addr: a}
		}
	}
	return Name{}
}

func service(tag, svc, ns string) Name {
	if svc == "" || ns == "" {
		return Name{}
	}
	return Name{Kind: KindService, Namespace: ns, Service: svc, Tag: tag}
}

// AddrName is the name of an address in the zone (<hex>.addr.trellis.):
// an SRV record's target. IPv4 is 8 hex digits, IPv6 32.
func AddrName(a netip.Addr) string {
	a = a.Unmap()
	return hex.EncodeToString(a.AsSlice()) + ".addr." + Domain
}

func decodeAddr(s string) (netip.Addr, bool) {
	if len(s) != 8 && len(s) != 32 {
		return netip.Addr{}, false
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return netip.Addr{}, false
	}
	a, ok := netip.AddrFromSlice(b)
	return a, ok
}
