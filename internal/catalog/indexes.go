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

// InstancesByInstance is the index of the controllers' cache that files a
// ServiceInstance of a task under the Instance (machine) it runs on: the
// instances whose checks the health controller sets critical when that
// Instance's agent is marked down, found without walking every instance.
// One registered from outside Trellis runs on none and is in no key.
var InstancesByInstance = &controller.Index{Name: "instances-by-instance", Keys: func(o *controller.Object) []string {
	si, ok := controller.Decoded[*pbcatalog.ServiceInstance](o)
	if !ok || si.GetInstance() == "" {
		return nil
	}
	return []string{si.GetInstance()}
}}

// HealthCached is what the servers' health controller declares of the
// cache: the service instances by service and by the Instance they run on.
var HealthCached = []controller.CachedType{
	{Type: ServiceInstanceType, Indexes: []*controller.Index{InstancesByService, InstancesByInstance}},
}

// InstancesOn returns the cached service instances of tasks that run on
// the Instance called instance, in every namespace; the cache must hold
// ServiceInstanceType with InstancesByInstance (HealthCached). The objects
// are shared: never change them.
func InstancesOn(c *controller.Cache, instance string) []*controller.Object {
	return c.ByIndex(ServiceInstanceType, InstancesByInstance.Name, instance)
}
