package catalog

import (
	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	"trellis.dev/trellis/internal/controller"
)

// InstancesByService is the index of the controllers' cache
// (controller.Cache) that files a ServiceInstance under ServiceKey of its
// namespace and service: the instances of one service, which the health
// controller, DNS and the proxies' endpoints look up, at the cost of that
// service's instances, not every instance. An instance whose data does not
// decode is in no index. Declared once here, so that every controller and
// operation that looks instances up by service shares one index.
var InstancesByService = &controller.Index{Name: "instances-by-service", Keys: func(o *controller.Object) []string {
	si, ok := controller.Decoded[*pbcatalog.ServiceInstance](o)
	if !ok || si.GetService() == "" {
		return nil
	}
	return []string{ServiceKey(o.Resource.GetId().GetTenancy().GetNamespace(), si.GetService())}
}}

// ServiceKey is the key of the service name of namespace ns in
// InstancesByService.
func ServiceKey(ns, name string) string { return ns + "/" + name }

// InstancesCached is what a reader of instances by service declares of
// the cache (controller.Cache.Declare, or controller.Controller.Cached).
var InstancesCached = []controller.CachedType{
	{Type: ServiceInstanceType, Indexes: []*controller.Index{InstancesByService}},
}

// InstancesOf returns the cached instances of service name in namespace
// ns; the cache must hold InstancesCached. The objects are shared: never
// change them.
func InstancesOf(c *controller.Cache, ns, name string) []*controller.Object {
	return c.ByIndex(ServiceInstanceType, InstancesByService.Name, ServiceKey(ns, name))
}
