package proxycomp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/informer"
	"trellis.dev/trellis/internal/mesh"
)

// Name is the component's name in logs and in the task records.
const Name = "proxy"

// The proxy's user and group, which the redirect rules skip and which own
// the socket.
const (
	ProxyUID = 1337
	ProxyGID = 1337
)

// followed are the types the snapshots are made of.
var followed = []controller.CachedType{
	{Type: catalog.ServiceInstanceType, Indexes: []*controller.Index{catalog.InstancesByService}},
	{Type: catalog.ServiceType},
	{Type: mesh.IntentionsType},
	{Type: mesh.MeshConfigType},
	{Type: ca.RootType},
}

// Component is the proxy component.
type Component struct {
	d   component.Deps
	log *slog.Logger

	// ctx ends when Start returns: every task's loop and server with it.
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	tasks map[string]*served // by task uid
	gone  map[string]bool    // uids whose Poststop ran
}

// New makes the component; it declares the types it follows to the
// agent's informer. An agent without a leaf cache has no leaf to give a
// proxy: the component then applies to no task and follows nothing.
func New(d component.Deps) (component.Component, error) {
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if d.Leaves != nil {
		if d.Informer == nil {
			return nil, fmt.Errorf("%s needs the agent's informer", Name)
		}
		// On demand: an agent opens these watches with its first mesh
		// task (ensure), not every agent of a fleet.
		if err := d.Informer.DeclareOnDemand(followed...); err != nil {
			return nil, fmt.Errorf("%s: %w", Name, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Component{
		d: d, log: log.With("component", Name), ctx: ctx, cancel: cancel,
		tasks: map[string]*served{}, gone: map[string]bool{},
	}, nil
}

func (*Component) Name() string { return Name }

// Applies: only mesh tasks have a proxy (component.Selective), and only
// on an agent with a leaf cache.
func (c *Component) Applies(t component.Task) bool {
	return c.d.Leaves != nil && t.Definition.GetMesh() != nil
}

// Start follows the informer's changes, recomputing the snapshots of the
// tasks served, until ctx ends; then it stops every server.
func (c *Component) Start(ctx context.Context) error {
	defer c.stopAll()
	if c.d.Leaves == nil {
		c.log.Info("the agent runs without a leaf cache: mesh tasks get no proxy snapshots")
		<-ctx.Done()
		return nil
	}
	var subs []*informer.Subscription
	defer func() {
		for _, s := range subs {
			s.Cancel()
		}
	}()
	for _, ct := range followed {
		s, err := c.d.Informer.Subscribe(ct.Type, func(d informer.Delta) { c.kick(changeOf(d)) })
		if err != nil {
			return err
		}
		subs = append(subs, s)
	}
	<-ctx.Done()
	return nil
}

func (c *Component) stopAll() {
	c.cancel()
	c.mu.Lock()
	all := make([]*served, 0, len(c.tasks))
	for _, s := range c.tasks {
		all = append(all, s)
	}
	c.mu.Unlock()
	for _, s := range all {
		s.stop()
	}
}

// kick has the snapshots ch concerns computed again.
func (c *Component) kick(ch change) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.tasks {
		if s.interest.concerns(ch) {
			s.kick()
		}
	}
}

// Prestart serves the task's socket before its first container (its
// proxy) starts.
func (c *Component) Prestart(ctx context.Context, t component.Task) error {
	if !c.Applies(t) {
		return nil
	}
	s := c.ensure(t)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.listening:
		return s.listenErr
	}
}

// TaskHealthChanged serves the socket of a task the agent resumed after a
// restart, whose Prestart ran before (component.HealthObserver).
func (c *Component) TaskHealthChanged(t component.Task, h component.TaskHealth) {
	if !c.Applies(t) || h.Stopping {
		return
	}
	c.ensure(t)
}

// Poststop stops serving the task and removes its socket.
func (c *Component) Poststop(ctx context.Context, t component.Task) error {
	uid := t.ID.GetUid()
	c.mu.Lock()
	s := c.tasks[uid]
	delete(c.tasks, uid)
	c.gone[uid] = true
	c.mu.Unlock()
	if s != nil {
		s.stop()
	}
	err := removeSocket(SocketPath(t.Dir))
	if errors.Is(err, errNotSocket) {
		c.log.Warn("left alone: not the proxy's socket", "task", t.ID.GetName(), "path", SocketPath(t.Dir))
		return nil
	}
	return err
}

// ensure returns the task's served entry, made and started when there is
// none. It does no I/O itself: the entry's goroutine listens.
func (c *Component) ensure(t component.Task) *served {
	types := make([]*pbresource.Type, len(followed))
	for i, ct := range followed {
		types[i] = ct.Type
	}
	if err := c.d.Informer.Follow(types...); err != nil {
		c.log.Error("cannot follow what the proxy snapshots need", "err", err)
	}
	uid := t.ID.GetUid()
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.tasks[uid]; s != nil {
		return s
	}
	s := newServed(c, t)
	if c.gone[uid] || c.ctx.Err() != nil {
		s.listenErr = fmt.Errorf("task %s: the proxy component has stopped serving it", t.ID.GetName())
		close(s.listening)
		return s
	}
	c.tasks[uid] = s
	go s.run()
	return s
}
