package session

import (
	"context"
	"fmt"
)

// register registers the Instance for the current session: one
// AgentService.Register call, which writes the registration to the
// Instance's status["agent"] (creating the Instance when there is none)
// and leaves what the operator set alone.
func (c *conn) register(ctx context.Context) error {
	s := c.s
	r := s.registration(false)
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RPCTimeout)
	_, err := c.hb.Register(rctx, registerRequest(s.cfg.Name, r, s.clock.Now()))
	cancel()
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

// registration is what the current session registers; left marks it
// left.
func (s *Session) registration(left bool) registration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return registration{
		cluster:    s.cfg.Cluster,
		address:    s.cfg.Address,
		session:    s.id,
		version:    s.cfg.Version,
		facts:      s.facts,
		attributes: s.cfg.Attributes,
		left:       left,
	}
}

// MarkLeft marks the Instance left, through the live connection (waiting
// for one, and trying again, until it is done or ctx ends): a
// registration of the current session with left set. An Instance an
// operator removed is left as it is (the server creates none for it).
func (s *Session) MarkLeft(ctx context.Context) error {
	return s.withConn(ctx, func(c *conn) error {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.RPCTimeout)
		defer cancel()
		_, err := c.hb.Register(rctx, registerRequest(s.cfg.Name, s.registration(true), s.clock.Now()))
		return err
	})
}
