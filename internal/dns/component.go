package dns

import (
	"context"

	"trellis.dev/trellis/internal/agent/component"
)

// AgentComponent is the DNS interface as a component of the agent
// (internal/agent/component): it answers from the agent's informer, which
// follows the catalog over the agent's one link to the servers, so that a
// query never waits for a server, and answers while none is reachable
// from what the agent last saw. It has no per-task hooks.
type AgentComponent struct {
	cfg Config
	srv *Server
}

// NewAgentComponent returns the component that serves DNS at addr
// (host:port, UDP and TCP) with answers of ttl; its Make is the agent's
// component.Maker.
func NewAgentComponent(addr string, ttl uint32) *AgentComponent {
	return &AgentComponent{cfg: Config{Addr: addr, TTL: ttl}}
}

// Make declares the types the answers read on the agent's informer and
// binds the address, so that an agent whose -dns-addr is taken fails to
// start, saying so.
func (c *AgentComponent) Make(d component.Deps) (component.Component, error) {
	if err := d.Informer.Declare(CachedTypes(true)...); err != nil {
		return nil, err
	}
	cfg := c.cfg
	cfg.Catalog = InformerCatalog{In: d.Informer, Machines: true}
	if d.Logger != nil {
		cfg.Logger = d.Logger.With("component", "dns")
	}
	srv, err := NewServer(cfg)
	if err != nil {
		return nil, err
	}
	if err := srv.Listen(); err != nil {
		return nil, err
	}
	c.srv = srv
	return c, nil
}

// Addr is the address the component listens on, once made; "" before.
func (c *AgentComponent) Addr() string {
	if c.srv == nil {
		return ""
	}
	return c.srv.Addr()
}

// Name is "dns".
func (*AgentComponent) Name() string { return "dns" }

// Start serves until ctx ends.
func (c *AgentComponent) Start(ctx context.Context) error { return c.srv.Start(ctx) }

// Prestart has nothing to do for a task.
func (*AgentComponent) Prestart(context.Context, component.Task) error { return nil }

// Poststop has nothing to do for a task.
func (*AgentComponent) Poststop(context.Context, component.Task) error { return nil }
