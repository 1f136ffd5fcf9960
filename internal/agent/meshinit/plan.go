package meshinit

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// Registration is what mesh-init registers for a task: its service
// instance and, when absent, its service.
type Registration struct {
	// Instance is the task's catalog/v1/ServiceInstance, with its owner
	// (the task, uid included) and data; no version.
	Instance *pbresource.Resource
	// Service is the catalog/v1/Service it is an instance of, created
	// only when there is none.
	Service *pbresource.Resource
}

// Plan says what mesh-init registers for task t, which runs on the
// instance (machine) called instance, reached at host: nil for a task
// without a mesh block. It is pure.
//
// The instance's address is the task's own in its network namespace
// (bridge), or the instance's host (host network), where the app listens
// on the mesh block's port; its proxy listens on the proxy's inbound port
// (orchestrator.ProxyInboundPort), transparent when the mesh block says
// so. Its checks are catalog.TaskCheckDefinitions.
func Plan(t component.Task, instance, host string) (*Registration, error) {
	td := t.Definition
	m := td.GetMesh()
	if m == nil {
		return nil, nil
	}
	task := t.ID.GetName()
	var address string
	switch t.Network.Mode {
	case orchestrator.NetworkBridge:
		if !t.Network.Address.IsValid() {
			return nil, fmt.Errorf("task %s is in bridge mode but has no address in its network namespace", task)
		}
		address = t.Network.Address.Addr().String()
	default:
		if host == "" {
			return nil, fmt.Errorf("instance %s has no address to register task %s's service at", instance, task)
		}
		address = host
	}
	mode := catalog.ProxyModeLocal
	if m.GetTransparent() {
		mode = catalog.ProxyModeTransparent
	}
	service := orchestrator.MeshService(td)
	si := &pbcatalog.ServiceInstance{
		Service:  service,
		Address:  address,
		Port:     m.GetPort(),
		Proxy:    &pbcatalog.Proxy{Port: orchestrator.ProxyInboundPort, Mode: mode},
		Instance: instance,
		Task:     task,
		Tags:     slices.Clone(m.GetTags()),
		Meta:     maps.Clone(m.GetMeta()),
		Checks:   catalog.TaskCheckDefinitions(task, td),
	}
	siData, err := anypb.New(si)
	if err != nil {
		return nil, err
	}
	svcData, err := anypb.New(&pbcatalog.Service{Protocol: orchestrator.MeshProtocol(m), Mesh: true})
	if err != nil {
		return nil, err
	}
	owner := proto.Clone(t.ID).(*pbresource.ID)
	return &Registration{
		Instance: &pbresource.Resource{Id: InstanceID(t), Owner: owner, Data: siData},
		Service:  &pbresource.Resource{Id: catalog.ServiceID(namespaceOf(t), service), Data: svcData},
	}, nil
}

// InstanceID is the id of the service instance of task t, named after the
// task in its namespace; nil for a task without a mesh block.
func InstanceID(t component.Task) *pbresource.ID {
	if t.Definition.GetMesh() == nil {
		return nil
	}
	return catalog.ServiceInstanceID(namespaceOf(t), t.ID.GetName())
}

func namespaceOf(t component.Task) string {
	if ns := t.ID.GetTenancy().GetNamespace(); ns != "" {
		return ns
	}
	return resource.DefaultNamespace
}
