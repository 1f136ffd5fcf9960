package mesh

import (
	"trellis.dev/trellis/internal/controller"
)

// IntentionsByDestination files each Intentions under its destination,
// DestinationKey(namespace, service): how a proxy's snapshot finds the
// rules of the service it fronts in the cache. One resource per
// destination is the rule today; the index is the lookup that stays when
// wildcard destinations come (they will file under their pattern, and a
// reader asks for the exact key, then the namespace's and every
// namespace's).
var IntentionsByDestination = &controller.Index{Name: "mesh-intentions-by-destination", Keys: func(o *controller.Object) []string {
	id := o.Resource.GetId()
	return []string{DestinationKey(namespaceOf(id), id.GetName())}
}}

// DestinationKey is the key of a destination in IntentionsByDestination.
func DestinationKey(namespace, service string) string { return namespace + "/" + service }
