package leaves

import (
	"fmt"

	"trellis.dev/trellis/internal/ca"
)

// Key names a leaf of the cache: the agent's own (AgentKey), or a
// service's in a namespace.
type Key struct {
	Agent     bool
	Namespace string
	Service   string
}

// AgentKey is the key of the agent's own leaf.
var AgentKey = Key{Agent: true}

// ServiceKey is the key of service svc's leaf in namespace ns.
func ServiceKey(ns, svc string) Key { return Key{Namespace: ns, Service: svc} }

func (k Key) String() string {
	if k.Agent {
		return "agent"
	}
	return k.Namespace + "/" + k.Service
}

// identity is the SPIFFE id of k's leaf in trust domain td and datacenter
// dc, for the agent of instance.
func (k Key) identity(td, dc, instance string) ca.Identity {
	if k.Agent {
		return ca.AgentID{TrustDomain: td, Datacenter: dc, Instance: instance}
	}
	return ca.ServiceID{TrustDomain: td, Namespace: k.Namespace, Datacenter: dc, Service: k.Service}
}

// commonName is the leaf's subject common name (informational: peers
// check the URI SAN).
func (k Key) commonName(instance string) string {
	if k.Agent {
		return instance
	}
	return k.Service
}

func (k Key) check() error {
	if k.Agent {
		if k.Namespace != "" || k.Service != "" {
			return fmt.Errorf("leaf key %+v: the agent's leaf has no namespace or service", k)
		}
		return nil
	}
	if k.Namespace == "" || k.Service == "" {
		return fmt.Errorf("leaf key %q: a service's leaf needs a namespace and a service", k)
	}
	return nil
}
