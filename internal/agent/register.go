package agent

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// maxCASAttempts bounds the read-modify-write loops on the Instance: a
// conflict means someone wrote it in between (an operator draining it),
// which settles within a few rounds.
const maxCASAttempts = 10

// register writes the Instance for the current session.
func (a *Agent) register(ctx context.Context, s *session) error {
	a.mu.Lock()
	r := registration{
		cluster:    a.cfg.Cluster,
		address:    a.address,
		session:    a.session,
		version:    a.cfg.Version,
		facts:      a.facts,
		attributes: a.cfg.Attributes,
	}
	a.mu.Unlock()
	now := a.clock.Now()
	err := a.updateInstance(ctx, s, func(stored *pborch.Instance) (*pborch.Instance, error) {
		return mergeInstance(stored, r, now), nil
	})
	if err != nil {
		return fmt.Errorf("register instance %s: %w", a.cfg.Name, err)
	}
	a.mu.Lock()
	if a.session == r.session {
		a.registered = true
	}
	a.mu.Unlock()
	a.log.Info("registered", "server", s.addr, "session", r.session, "cluster", r.cluster, "address", r.address)
	return nil
}

// updateInstance reads the Instance, changes it with edit (stored is nil
// when there is none; returning nil writes nothing) and writes it back
// with CAS, again on a conflict.
func (a *Agent) updateInstance(ctx context.Context, s *session, edit func(stored *pborch.Instance) (*pborch.Instance, error)) error {
	id := orchestrator.InstanceID(a.cfg.Name)
	for attempt := 1; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, a.cfg.RPCTimeout)
		resp, err := s.res.Read(rctx, &pbresource.ReadRequest{Id: id, Consistent: true})
		cancel()
		var stored *pborch.Instance
		var current *pbresource.Resource
		switch status.Code(err) {
		case codes.OK:
			current = resp.GetResource()
			stored = &pborch.Instance{}
			if err := current.GetData().UnmarshalTo(stored); err != nil {
				return fmt.Errorf("decode the stored instance: %w", err)
			}
		case codes.NotFound:
		default:
			return err
		}
		in, err := edit(stored)
		if err != nil || in == nil {
			return err
		}
		data, err := anypb.New(in)
		if err != nil {
			return err
		}
		w := &pbresource.Resource{Id: proto.Clone(id).(*pbresource.ID), Data: data}
		if current != nil {
			w.Id = current.GetId()
			w.Owner = current.GetOwner()
			w.Metadata = current.GetMetadata()
			w.Version = current.GetVersion()
		}
		wctx, cancel := context.WithTimeout(ctx, a.cfg.RPCTimeout)
		_, err = s.res.Write(wctx, &pbresource.WriteRequest{Resource: w})
		cancel()
		if status.Code(err) == codes.Aborted && attempt < maxCASAttempts {
			continue
		}
		return err
	}
}
