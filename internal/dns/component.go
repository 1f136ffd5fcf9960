package dns

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"

	"trellis.dev/trellis/internal/agent/component"
)

// AgentComponent is the DNS interface as a component of the agent
// (internal/agent/component): it answers from the agent's informer, which
// follows the catalog over the agent's one link to the servers, so that a
// query never waits for a server, and answers while none is reachable
// from what the agent last saw. It has no per-task hooks: the agent asks
// it to serve in each bridge task's namespace (ServeTaskNamespace) as it
// sets the namespace up or adopts it.
type AgentComponent struct {
	cfg Config
	srv *Server
	// recursors answer, in a task's namespace, the names outside
	// trellis.; nil: the host's resolv.conf's, read at each task's setup.
	recursors []netip.AddrPort
}

// NewAgentComponent returns the component that serves DNS at addr
// (host:port, UDP and TCP) with answers of ttl; its Make is the agent's
// component.Maker.
func NewAgentComponent(addr string, ttl uint32) *AgentComponent {
	return &AgentComponent{cfg: Config{Addr: addr, TTL: ttl}}
}

// WithRecursors sets the servers that names outside trellis. are
// forwarded to from the tasks' namespaces (-dns-recursor); without it,
// those of the host's /etc/resolv.conf.
func (c *AgentComponent) WithRecursors(r []netip.AddrPort) *AgentComponent {
	c.recursors = r
	return c
}

// ServeTaskNamespace serves DNS in a bridge task's network namespace, on
// 127.0.0.1 and the port of the component's own address (the one the
// agent's -dns-addr bound): the trellis. names from the agent's cache,
// every other name forwarded to the recursors. It returns the listener
// and its address, for the rules that send the task's queries to it.
func (c *AgentComponent) ServeTaskNamespace(path string) (io.Closer, netip.AddrPort, error) {
	if c.srv == nil {
		return nil, netip.AddrPort{}, fmt.Errorf("dns: the component is not made")
	}
	_, p, _ := net.SplitHostPort(c.srv.Addr())
	port, _ := strconv.Atoi(p)
	recursors := c.recursors
	if recursors == nil {
		var err error
		if recursors, err = HostRecursors(); err != nil {
			return nil, netip.AddrPort{}, err
		}
	}
	l, err := c.srv.ServeNamespace(path, port, recursors)
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	return l, l.Addr(), nil
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
