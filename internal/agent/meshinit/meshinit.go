package meshinit

import (
	"context"
	"fmt"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/resource"
)

// Name is the component's name in logs and in the task records.
const Name = "mesh-init"

// meshInit is the component.
type meshInit struct {
	instance string
	host     string
	servers  component.Servers
	log      *slog.Logger
}

// New makes mesh-init from what it uses of the agent: its instance, its
// host and its link to the servers.
func New(d component.Deps) (component.Component, error) {
	if d.Servers == nil {
		return nil, fmt.Errorf("%s needs the agent's link to the servers", Name)
	}
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &meshInit{instance: d.Instance, host: d.Address, servers: d.Servers, log: log.With("component", Name)}, nil
}

func (*meshInit) Name() string { return Name }

// Start has nothing long-lived to run: it waits for the agent to stop.
func (*meshInit) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// Applies: mesh-init's hooks concern mesh tasks only (component.Selective).
func (*meshInit) Applies(t component.Task) bool { return t.Definition.GetMesh() != nil }

// Prestart registers the task's service instance, and its service when
// there is none, before the task's first container starts.
func (m *meshInit) Prestart(ctx context.Context, t component.Task) error {
	reg, err := Plan(t, m.instance, m.host)
	if err != nil || reg == nil {
		return err
	}
	return m.servers.Call(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		rs := pbresource.NewResourceServiceClient(cc)
		if err := m.ensureService(ctx, rs, reg.Service); err != nil {
			return err
		}
		created, err := register(ctx, rs, reg.Instance)
		if err != nil {
			return err
		}
		if created {
			m.log.Info("registered the task's service instance", "task", t.ID.GetName(), "instance", ids.String(reg.Instance.GetId()))
		}
		return nil
	})
}

// ensureService creates svc when nothing is stored under its name. One
// that is stored is left as it is; that it speaks another protocol than
// the task's mesh block says is logged (the Service decides what the
// proxies do).
func (m *meshInit) ensureService(ctx context.Context, rs pbresource.ResourceServiceClient, svc *pbresource.Resource) error {
	resp, err := rs.Read(ctx, &pbresource.ReadRequest{Id: svc.GetId()})
	if status.Code(err) != codes.NotFound {
		if err != nil {
			return fmt.Errorf("read service %s: %w", svc.GetId().GetName(), err)
		}
		stored, errS := resource.DecodeData[*pbcatalog.Service](resp.GetResource())
		want, errW := resource.DecodeData[*pbcatalog.Service](svc)
		if errS == nil && errW == nil && stored.GetProtocol() != want.GetProtocol() {
			m.log.Warn("the service exists with another protocol than the task's mesh block says; it is left as it is",
				"service", ids.String(svc.GetId()), "protocol", stored.GetProtocol(), "mesh.protocol", want.GetProtocol())
		}
		return nil
	}
	create := proto.Clone(svc).(*pbresource.Resource)
	create.Version = resource.CreateOnly
	_, err = rs.Write(ctx, &pbresource.WriteRequest{Resource: create})
	if status.Code(err) == codes.Aborted {
		return nil // created meanwhile by another task of the service
	}
	if err != nil {
		return fmt.Errorf("create service %s: %w", svc.GetId().GetName(), err)
	}
	return nil
}

// register creates the service instance want, or finds it registered by
// the same task: then it writes nothing when it says what want says, and
// updates it with a compare-and-swap when it does not (the task's
// address changed). created says whether it created the instance.
func register(ctx context.Context, rs pbresource.ResourceServiceClient, want *pbresource.Resource) (created bool, err error) {
	name := want.GetId().GetName()
	for {
		create := proto.Clone(want).(*pbresource.Resource)
		create.Version = resource.CreateOnly
		_, err := rs.Write(ctx, &pbresource.WriteRequest{Resource: create})
		if status.Code(err) != codes.Aborted {
			if err != nil {
				return false, fmt.Errorf("register service instance %s: %w", name, err)
			}
			return true, nil
		}
		resp, err := rs.Read(ctx, &pbresource.ReadRequest{Id: want.GetId()})
		switch {
		case status.Code(err) == codes.NotFound:
			continue // deleted since: create it again
		case err != nil:
			return false, fmt.Errorf("read service instance %s: %w", name, err)
		}
		stored := resp.GetResource()
		if uid, mine := stored.GetOwner().GetUid(), want.GetOwner().GetUid(); uid != mine {
			return false, fmt.Errorf("service instance %s is registered by another task of that name (uid %s, this one's is %s): it goes with that task", name, uid, mine)
		}
		if sameData(stored, want) {
			return false, nil
		}
		update := proto.Clone(want).(*pbresource.Resource)
		update.Id.Uid, update.Version = stored.GetId().GetUid(), stored.GetVersion()
		_, err = rs.Write(ctx, &pbresource.WriteRequest{Resource: update})
		if status.Code(err) == codes.Aborted {
			continue // changed since it was read
		}
		if err != nil {
			return false, fmt.Errorf("update service instance %s: %w", name, err)
		}
		return false, nil
	}
}

// Poststop removes the task's service instance once its last container
// has exited. One that is gone already, or that another task of the same
// name registered since, is left alone.
func (m *meshInit) Poststop(ctx context.Context, t component.Task) error {
	id := InstanceID(t)
	if id == nil {
		return nil
	}
	return m.servers.Call(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		rs := pbresource.NewResourceServiceClient(cc)
		for {
			resp, err := rs.Read(ctx, &pbresource.ReadRequest{Id: id})
			switch {
			case status.Code(err) == codes.NotFound:
				return nil
			case err != nil:
				return fmt.Errorf("read service instance %s: %w", id.GetName(), err)
			}
			stored := resp.GetResource()
			if stored.GetOwner().GetUid() != t.ID.GetUid() {
				return nil // another task's of that name
			}
			if si, err := resource.DecodeData[*pbcatalog.ServiceInstance](stored); err != nil || si.GetInstance() != m.instance {
				return nil // not this agent's to remove
			}
			_, err = rs.Delete(ctx, &pbresource.DeleteRequest{Id: stored.GetId(), Version: stored.GetVersion()})
			switch status.Code(err) {
			case codes.OK:
				m.log.Info("deregistered the task's service instance", "task", t.ID.GetName(), "instance", ids.String(id))
				return nil
			case codes.NotFound:
				return nil
			case codes.Aborted:
				continue // its checks changed since it was read
			}
			return fmt.Errorf("deregister service instance %s: %w", id.GetName(), err)
		}
	})
}

// sameData says whether the stored instance says what want says (the
// data compared as messages: a map's encoding has no fixed order).
func sameData(stored, want *pbresource.Resource) bool {
	a, errA := resource.DecodeData[*pbcatalog.ServiceInstance](stored)
	b, errB := resource.DecodeData[*pbcatalog.ServiceInstance](want)
	return errA == nil && errB == nil && proto.Equal(a, b)
}
