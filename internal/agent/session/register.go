package session

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
func (c *conn) register(ctx context.Context) error {
	s := c.s
	s.mu.Lock()
	r := registration{
		cluster:    s.cfg.Cluster,
		address:    s.cfg.Address,
		session:    s.id,
		version:    s.cfg.Version,
		facts:      s.facts,
		attributes: s.cfg.Attributes,
	}
	s.mu.Unlock()
	now := s.clock.Now()
	err := c.updateInstance(ctx, func(stored *pborch.Instance) (*pborch.Instance, error) {
		return mergeInstance(stored, r, now), nil
	})
	if err != nil {
		return fmt.Errorf("register instance %s: %w", s.cfg.Name, err)
	}
	s.mu.Lock()
	if s.id == r.session {
		s.registered = true
	}
	s.mu.Unlock()
	s.log.Info("registered", "server", c.addr, "session", r.session, "cluster", r.cluster, "address", r.address)
	return nil
}

// MarkLeft marks the Instance left, through the live connection (waiting
// for one, and trying again, until it is done or ctx ends). An Instance an
// operator removed is left as it is.
func (s *Session) MarkLeft(ctx context.Context) error {
	return s.withConn(ctx, func(c *conn) error {
		return c.updateInstance(ctx, func(stored *pborch.Instance) (*pborch.Instance, error) {
			if stored == nil {
				return nil, nil // removed by an operator: nothing to mark
			}
			in := proto.Clone(stored).(*pborch.Instance)
			in.Status = orchestrator.InstanceLeft
			return in, nil
		})
	})
}

// updateInstance reads the Instance, changes it with edit (stored is nil
// when there is none; returning nil writes nothing) and writes it back
// with CAS, again on a conflict.
func (c *conn) updateInstance(ctx context.Context, edit func(stored *pborch.Instance) (*pborch.Instance, error)) error {
	id := orchestrator.InstanceID(c.s.cfg.Name)
	for attempt := 1; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, c.s.cfg.RPCTimeout)
		resp, err := c.res.Read(rctx, &pbresource.ReadRequest{Id: id, Consistent: true})
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
		wctx, cancel := context.WithTimeout(ctx, c.s.cfg.RPCTimeout)
		_, err = c.res.Write(wctx, &pbresource.WriteRequest{Resource: w})
		cancel()
		if status.Code(err) == codes.Aborted && attempt < maxCASAttempts {
			continue
		}
		return err
	}
}
