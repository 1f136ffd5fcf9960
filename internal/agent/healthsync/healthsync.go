package healthsync

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/catalog"
)

// Name is the component's name, in the tasks' records: never change it.
const Name = "health-sync"

// DefaultInterval is how long health-sync gathers changes before it writes
// them in one batch: a task whose check flaps every second costs the
// servers one write per interval for all of the agent's instances, not one
// per check per change. A task that stops is written at once.
const DefaultInterval = time.Second

// DefaultOutputInterval is how often a change of a check's output alone,
// its status the same, is written (Consul's check_update_interval).
const DefaultOutputInterval = 5 * time.Minute

// Config tunes health-sync. Its zero value is the production setting.
type Config struct {
	// OutputInterval is how often a change of outputs alone is written
	// (DefaultOutputInterval when zero).
	OutputInterval time.Duration
	// Interval is how long changes are gathered into one write
	// (DefaultInterval when zero); a failed write is tried again after it.
	Interval time.Duration
	// Catalog is how it reaches the servers (ServersCatalog over the
	// agent's link when nil).
	Catalog Catalog
}

// New returns the Maker of health-sync with cfg. Each agent it makes a
// component for gets its own (the defaults filled in for that agent).
func New(config Config) component.Maker {
	return func(d component.Deps) (component.Component, error) {
		cfg := config
		if cfg.Interval <= 0 {
			cfg.Interval = DefaultInterval
		}
		if cfg.OutputInterval <= 0 {
			cfg.OutputInterval = DefaultOutputInterval
		}
		if cfg.Catalog == nil {
			if d.Servers == nil {
				return nil, fmt.Errorf("%s needs the agent's link to the servers", Name)
			}
			cfg.Catalog = ServersCatalog(d.Servers)
		}
		if d.Clock == nil {
			return nil, fmt.Errorf("%s needs the agent's clock", Name)
		}
		log := d.Logger
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		return &HealthSync{
			cfg: cfg, clock: d.Clock, log: log.With("component", Name),
			tasks: make(map[string]*tracked), kick: make(chan struct{}, 1), urgent: make(chan struct{}, 1),
		}, nil
	}
}

// HealthSync is the component: see the package comment.
type HealthSync struct {
	cfg   Config
	clock component.Clock
	log   *slog.Logger

	flushMu sync.Mutex // one flush at a time

	mu     sync.Mutex
	tasks  map[string]*tracked // by task uid: the mesh tasks it has
	kick   chan struct{}       // a change waits
	urgent chan struct{}       // a stop waits: write at once
}

// tracked is one mesh task, as health-sync follows it.
type tracked struct {
	task   component.Task
	health component.TaskHealth
	heard  bool   // a health was given (or the task stopped)
	seq    uint64 // counts changes; a flush clears dirty only if none came since
	dirty  bool
	// instances are the task's ServiceInstances as last read or written
	// (nil: not looked up yet); written is the report last written of
	// each, by name.
	instances []*pbresource.Resource
	written   map[string]*pbcatalog.ChecksStatus
	// judged is the health whose judgements (not its outputs) were last
	// written: a change of outputs alone waits for OutputInterval.
	judged *component.TaskHealth
}

func (s *HealthSync) Name() string { return Name }

// Applies: health-sync's hooks concern mesh tasks only
// (component.Selective).
func (s *HealthSync) Applies(t component.Task) bool { return t.Definition.GetMesh() != nil }

// Prestart starts following a mesh task; a task without a mesh block has
// no service instance, and health-sync nothing to do for it.
func (s *HealthSync) Prestart(_ context.Context, t component.Task) error {
	if t.Definition.GetMesh() == nil {
		return nil
	}
	s.mu.Lock()
	s.trackLocked(t)
	s.mu.Unlock()
	return nil
}

func (s *HealthSync) trackLocked(t component.Task) *tracked {
	tr := s.tasks[t.ID.GetUid()]
	if tr == nil {
		tr = &tracked{task: t, written: map[string]*pbcatalog.ChecksStatus{}}
		s.tasks[t.ID.GetUid()] = tr
	}
	return tr
}

// TaskHealthChanged takes a mesh task's new health; the write happens
// within the interval, or at once when the task is stopping.
func (s *HealthSync) TaskHealthChanged(t component.Task, h component.TaskHealth) {
	if t.Definition.GetMesh() == nil {
		return
	}
	s.mu.Lock()
	tr := s.trackLocked(t) // a task resumed after a restart is heard of here first
	tr.health, tr.heard, tr.dirty = h, true, true
	tr.seq++
	s.mu.Unlock()
	signal(s.kick)
	if h.Stopping {
		signal(s.urgent)
	}
}

// Poststop writes every check of the task critical, and returns once that
// is stored (or the instance is gone): mesh-init's Poststop, which runs
// after it, removes the instance only then, so traffic leaves a task
// before its instance disappears. It retries until ctx ends.
func (s *HealthSync) Poststop(ctx context.Context, t component.Task) error {
	if t.Definition.GetMesh() == nil {
		return nil
	}
	s.mu.Lock()
	tr := s.trackLocked(t)
	if !tr.health.Stopping {
		tr.health = component.TaskHealth{Status: tr.health.Status, Stopping: true, StopReason: tr.health.StopReason}
		tr.seq++
	}
	tr.heard, tr.dirty = true, true
	uid := t.ID.GetUid()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.tasks, uid)
		s.mu.Unlock()
	}()
	for {
		s.flush(ctx, uid)
		s.mu.Lock()
		done := !tr.dirty
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("setting the checks of task %s critical: %w", t.ID.GetName(), ctx.Err())
		case <-s.clock.After(s.cfg.Interval):
		}
	}
}

// Start writes the changes: the first change of a quiet spell waits for
// the interval, so that the changes that follow it go in the same write;
// a stop is written at once. A write that fails is tried again after the
// interval.
func (s *HealthSync) Start(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.urgent:
		case <-s.clock.After(s.cfg.Interval):
		}
		s.flush(ctx, "")
		if s.anyDirty() {
			select {
			case <-ctx.Done():
				return nil
			case <-s.clock.After(s.cfg.Interval):
			}
			signal(s.kick)
		}
	}
}

func (s *HealthSync) anyDirty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tr := range s.tasks {
		if tr.dirty {
			return true
		}
	}
	return false
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// pending is one task's part of a flush.
type pending struct {
	tr        *tracked
	seq       uint64
	task      component.Task
	health    component.TaskHealth
	instances []*pbresource.Resource
	written   map[string]*pbcatalog.ChecksStatus
	judged    *component.TaskHealth
}

// flush writes what changed, of the task with uid only or ("") of every
// task, in one WriteStatuses.
func (s *HealthSync) flush(ctx context.Context, uid string) {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	var work []*pending
	for u, tr := range s.tasks {
		if !tr.dirty || !tr.heard || uid != "" && u != uid {
			continue
		}
		work = append(work, &pending{tr: tr, seq: tr.seq, task: tr.task, health: tr.health, instances: tr.instances, written: tr.written, judged: tr.judged})
	}
	s.mu.Unlock()

	now := s.clock.Now()
	failed := map[*pending]bool{}
	held := map[*pending]bool{}
	req := &pbresource.WriteStatusesRequest{}
	type member struct {
		p    *pending
		name string
		cs   *pbcatalog.ChecksStatus
	}
	var members []member
	for _, p := range work {
		if p.instances == nil {
			found, err := s.cfg.Catalog.InstancesOf(ctx, p.task.ID)
			if err != nil {
				s.log.Warn("cannot look up a task's service instances; trying again", "task", p.task.ID.GetName(), "err", err)
				failed[p] = true
				continue
			}
			if len(found) == 0 {
				// Not registered (yet): looked up again at the next change.
				s.log.Debug("the task has no service instance: nothing to report", "task", p.task.ID.GetName())
				continue
			}
			p.instances = found
		}
		for _, res := range p.instances {
			si := &pbcatalog.ServiceInstance{}
			if err := res.GetData().UnmarshalTo(si); err != nil {
				s.log.Error("cannot decode a service instance; not reporting its checks", "instance", res.GetId().GetName(), "err", err)
				continue
			}
			prev := p.written[res.GetId().GetName()]
			every := s.cfg.OutputInterval
			if p.judged == nil || !sameJudgement(*p.judged, p.health) {
				every = 0 // the health itself changed: its outputs go with it
			}
			cs := Report(si, p.task.ID.GetName(), p.health, prev, now, every)
			if cs == nil {
				if Report(si, p.task.ID.GetName(), p.health, prev, now, 0) != nil {
					held[p] = true // outputs alone changed: written once their interval is up
				}
				continue
			}
			payload, err := anypb.New(cs)
			if err != nil {
				s.log.Error("cannot encode a checks report", "instance", res.GetId().GetName(), "err", err)
				continue
			}
			req.Statuses = append(req.Statuses, &pbresource.WriteStatusRequest{
				Id: res.GetId(), Key: catalog.AgentChecksStatusKey,
				Status: &pbresource.Status{ObservedGeneration: res.GetGeneration(), Data: payload},
			})
			members = append(members, member{p: p, name: res.GetId().GetName(), cs: cs})
		}
	}

	gone := map[*pending]map[string]bool{}
	stored := map[*pending]map[string]*pbresource.Resource{}
	if len(req.Statuses) > 0 {
		resp, err := s.cfg.Catalog.WriteStatuses(ctx, req)
		if err != nil {
			s.log.Warn("cannot write the checks of the agent's service instances; trying again", "instances", len(req.Statuses), "err", err)
			for _, m := range members {
				failed[m.p] = true
			}
		} else {
			for i, m := range members {
				r := resp.GetResults()[i]
				switch {
				case r.GetError() == nil:
					if stored[m.p] == nil {
						stored[m.p] = map[string]*pbresource.Resource{}
					}
					stored[m.p][m.name] = r.GetResource()
					m.p.written[m.name] = m.cs
				case codes.Code(r.GetError().GetCode()) == codes.NotFound:
					if gone[m.p] == nil {
						gone[m.p] = map[string]bool{}
					}
					gone[m.p][m.name] = true // removed already: nothing to report
				default:
					failed[m.p] = true
					s.log.Warn("cannot write an instance's checks; trying again", "instance", m.name, "err", r.GetError().GetMessage())
				}
			}
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range work {
		if !failed[p] {
			h := p.health
			p.tr.judged = &h
		}
		if !failed[p] && !held[p] && p.tr.seq == p.seq {
			p.tr.dirty = false
		}
		if p.instances == nil {
			continue // none found, or the look-up failed
		}
		var keep []*pbresource.Resource
		for _, res := range p.instances {
			name := res.GetId().GetName()
			switch {
			case gone[p][name]:
			case stored[p][name] != nil:
				keep = append(keep, stored[p][name])
			default:
				keep = append(keep, res)
			}
		}
		p.tr.instances = keep
	}
}

// sameJudgement says whether two healths judge the task and its
// containers alike, whatever their checks' outputs say.
func sameJudgement(a, b component.TaskHealth) bool {
	if a.Status != b.Status || a.Stopping != b.Stopping || a.Health != b.Health || len(a.Containers) != len(b.Containers) {
		return false
	}
	for i, c := range a.Containers {
		d := b.Containers[i]
		if c.Name != d.Name || c.HasCheck != d.HasCheck || c.Health != d.Health {
			return false
		}
	}
	return true
}
