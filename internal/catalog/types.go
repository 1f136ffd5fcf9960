package catalog

import (
	"time"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// Group and GroupVersion of the catalog's types.
const (
	Group        = "catalog"
	GroupVersion = "v1"
)

// The catalog's resource types. See api/catalog/v1/catalog.proto for
// their fields.
var (
	// ServiceType is catalog/v1/Service, namespaced, named by the
	// service's name.
	ServiceType = &pbresource.Type{Group: Group, GroupVersion: GroupVersion, Kind: "Service"}
	// ServiceInstanceType is catalog/v1/ServiceInstance, namespaced.
	ServiceInstanceType = &pbresource.Type{Group: Group, GroupVersion: GroupVersion, Kind: "ServiceInstance"}
)

// The status keys of a ServiceInstance, each with one owner; both take a
// ChecksStatus. HealthOf merges them into what readers see.
const (
	// AgentChecksStatusKey is the checks of an instance of a task, as the
	// agent of the instance (machine) the task runs on reports them
	// (health-sync). Only that agent writes it; an instance registered
	// from outside runs on none, so nobody writes it there.
	AgentChecksStatusKey = "agent"
	// ServerChecksStatusKey is the servers' word on the checks: the TTL
	// checks of an instance registered from outside (refreshed through
	// the catalog's operations, expired by the health controller), and
	// the verdict on an instance of a task whose agent is down. Only the
	// catalog's health controller, HealthControllerName, and operations
	// that act as it (resource.AsController) write it.
	ServerChecksStatusKey = "catalog-health"
	// HealthControllerName is the servers' controller that owns
	// ServerChecksStatusKey.
	HealthControllerName = ServerChecksStatusKey
)

// Protocols of a Service.
const (
	ProtocolTCP  = "tcp"
	ProtocolHTTP = "http"
	ProtocolGRPC = "grpc"
)

// Protocols lists a Service's protocols, the default first.
var Protocols = []string{ProtocolTCP, ProtocolHTTP, ProtocolGRPC}

// Modes of a service instance's proxy.
const (
	ProxyModeLocal       = "local"
	ProxyModeTransparent = "transparent"
)

// Limits of a ServiceInstance. Consul's limits on meta, as its users know
// them, and bounds that keep one instance small in every watch.
const (
	MaxTags              = 64
	MaxTagLength         = 255
	MaxMetaEntries       = 64
	MaxMetaKeyLength     = 128
	MaxMetaValueLength   = 512
	MaxChecks            = 32
	MaxCheckNameLength   = 128
	MaxCheckOutputLength = 4096
	MaxAddressLength     = 253
	MinTTL               = time.Second
	MaxTTL               = 24 * time.Hour
)

// Register registers the catalog's types.
//
// A ServiceInstance's checks' status is never data: a generic write of
// its data cannot touch it, and each of its two status keys has one
// owner (resource.StatusOwner), so neither another instance's agent, nor
// a generic WriteStatus, nor the HTTP API can forge a service's health.
func Register(r *resource.Registry) {
	r.Register(resource.Registration{
		Type:     ServiceType,
		Proto:    &pbcatalog.Service{},
		Scope:    resource.ScopeNamespace,
		Mutate:   MutateService,
		Validate: ValidateService,
	})
	r.Register(resource.Registration{
		Type:           ServiceInstanceType,
		Proto:          &pbcatalog.ServiceInstance{},
		Scope:          resource.ScopeNamespace,
		Mutate:         MutateServiceInstance,
		Validate:       ValidateServiceInstance,
		ValidateUpdate: ValidateServiceInstanceUpdate,
		ValidateOwner:  ValidateServiceInstanceOwner,
		// Among agents, only the agent of the instance a task runs on
		// registers, changes or removes its service instance (mesh-init).
		AgentWritten: instanceOf,
		Statuses: map[string]resource.StatusPayload{
			AgentChecksStatusKey:  {Owner: resource.StatusOwner{AgentOf: instanceOf}, Proto: &pbcatalog.ChecksStatus{}, Validate: ValidateChecksStatus},
			ServerChecksStatusKey: {Owner: resource.StatusOwner{Controller: HealthControllerName}, Proto: &pbcatalog.ChecksStatus{}, Validate: ValidateChecksStatus},
		},
	})
}

// instanceOf is the Instance a stored ServiceInstance runs on, whose
// agent alone writes its AgentChecksStatusKey: "" for one registered from
// outside, which no agent may write.
func instanceOf(res *pbresource.Resource) (string, error) {
	si, err := resource.DecodeData[*pbcatalog.ServiceInstance](res)
	if err != nil {
		return "", err
	}
	return si.GetInstance(), nil
}

// ServiceID is the id of the Service called name in namespace ns.
func ServiceID(ns, name string) *pbresource.ID {
	return &pbresource.ID{Type: ServiceType, Tenancy: &pbresource.Tenancy{Namespace: ns}, Name: name}
}

// ServiceInstanceID is the id of the ServiceInstance called name in
// namespace ns.
func ServiceInstanceID(ns, name string) *pbresource.ID {
	return &pbresource.ID{Type: ServiceInstanceType, Tenancy: &pbresource.Tenancy{Namespace: ns}, Name: name}
}
