package dns

import (
	"net"
	"net/netip"
	"strings"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/informer"
	"trellis.dev/trellis/internal/orchestrator"
)

// EndpointOf is the derived value of a cached ServiceInstance that the
// answers read: an Endpoint, worked out once per change as the cache
// applies it (its health through catalog.HealthOf), not once per query.
var EndpointOf = &controller.Derived{Name: "dns-endpoint", Make: func(o *controller.Object) any {
	si, ok := controller.Decoded[*pbcatalog.ServiceInstance](o)
	if !ok {
		return nil
	}
	return endpointOf(o, si)
}}

func endpointOf(o *controller.Object, si *pbcatalog.ServiceInstance) Endpoint {
	ep := Endpoint{Name: o.Resource.GetId().GetName(), Port: uint16(si.GetPort()), Tags: lowerTags(si.GetTags())}
	if a, err := netip.ParseAddr(si.GetAddress()); err == nil && a.Zone() == "" {
		ep.Addr = a.Unmap()
	} else if si.GetAddress() != "" {
		ep.Host = strings.ToLower(strings.TrimSuffix(si.GetAddress(), ".")) + "."
	}
	ep.Passing = catalog.HealthOf(o.Resource).GetHealth() == catalog.CheckPassing
	return ep
}

// CachedTypes are the types the answers read, with the index and derived
// values they look them up by: a process declares them on its informer
// (informer.Informer.Declare) before it starts. machines adds the
// orchestrator's Instances (<instance>.instance.trellis.), for a process
// whose server serves them.
func CachedTypes(machines bool) []controller.CachedType {
	types := []controller.CachedType{
		{Type: catalog.ServiceInstanceType, Indexes: []*controller.Index{catalog.InstancesByService}, Derived: []*controller.Derived{EndpointOf}},
		{Type: catalog.ServiceType},
	}
	if machines {
		types = append(types, controller.CachedType{Type: orchestrator.InstanceType, Derived: []*controller.Derived{orchestrator.MergedInstance}})
	}
	return types
}

// InformerCatalog is a Catalog over an informer that holds
// CachedTypes(Machines): the cache as it is when asked (a server's or an
// agent's; no round trip).
type InformerCatalog struct {
	In       *informer.Informer
	Machines bool
}

// Service returns the cached instances of the service; it is known when
// its Service resource or any instance is cached.
func (c InformerCatalog) Service(ns, name string) ([]Endpoint, bool) {
	objs := c.In.ByIndex(catalog.ServiceInstanceType, catalog.InstancesByService.Name, catalog.ServiceKey(ns, name))
	eps := make([]Endpoint, 0, len(objs))
	for _, o := range objs {
		if ep, ok := controller.DerivedOf[Endpoint](o, EndpointOf); ok {
			eps = append(eps, ep)
		}
	}
	if len(objs) > 0 {
		return eps, true
	}
	return nil, c.In.Get(catalog.ServiceID(ns, name)) != nil
}

// Instance returns the host of the cached Instance's address (invalid
// when it is not an IP address).
func (c InformerCatalog) Instance(name string) (netip.Addr, bool) {
	if !c.Machines {
		return netip.Addr{}, false
	}
	if !c.In.Synced(orchestrator.InstanceType) {
		// Not listed yet (or not readable with this process's token): the
		// name may exist, so NODATA, never NXDOMAIN; the services' names
		// do not wait for it (Synced).
		return netip.Addr{}, true
	}
	o := c.In.Get(orchestrator.InstanceID(name))
	if o == nil {
		return netip.Addr{}, false
	}
	in, ok := orchestrator.CachedInstance(o) // its agent's registration merged
	if !ok {
		return netip.Addr{}, true
	}
	host, _, err := net.SplitHostPort(in.GetAddress())
	if err != nil {
		host = in.GetAddress()
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, true // it exists, with no address to answer
	}
	return a.Unmap(), true
}

// Synced reports whether the informer has listed the catalog's types
// whole (the Instances, which only <instance>.instance.trellis. reads, are
// waited for by Instance alone).
func (c InformerCatalog) Synced() bool {
	for _, ct := range CachedTypes(false) {
		if !c.In.Synced(ct.Type) {
			return false
		}
	}
	return true
}

// Revision changes whenever a type the answers read changes: the sum of
// the informer's last change of each (Raft indexes, which only grow).
func (c InformerCatalog) Revision() uint64 {
	var r uint64
	for _, ct := range CachedTypes(c.Machines) {
		r += c.In.LastChange(ct.Type)
	}
	return r
}
