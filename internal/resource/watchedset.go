package resource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

// Watcher opens WatchList streams. The API is one (a server's code over
// its own state); a client of a server's gRPC face can be another (the
// agent's link to the servers).
type Watcher interface {
	Watch(context.Context, *pbresource.WatchListRequest) (storage.Watch, error)
}

// WatchedSetConfig says what a WatchedSet follows and whom it tells.
type WatchedSetConfig struct {
	Source Watcher
	Type   *pbresource.Type
	// Namespace is the one namespace followed: "" for a cluster-scoped
	// type (or the default namespace). Never the wildcard: the set is
	// keyed by name, which is unique in one namespace only.
	Namespace string
	// Changed gets the whole current set, keyed by name, once the watch's
	// snapshot is in and after every change that follows, in the store's
	// order, on Start's goroutine. The map is the WatchedSet's own: read
	// it during the call, never keep or change it. An error ends the
	// watch, which is opened again after the backoff, as a broken one.
	Changed func(set map[string]*pbresource.Resource) error
	// Retry paces the watches opened again after a failure; the failures
	// are forgotten once a snapshot is delivered. Rand draws the jitter
	// (math/rand/v2's Float64); nil waits the full backoff.Policy.Ceiling.
	Retry  backoff.Policy
	Rand   func() float64
	Logger *slog.Logger // discards when nil
}

// check names what in c is missing or wrong.
func (c WatchedSetConfig) check() error {
	var problems []error
	if c.Source == nil {
		problems = append(problems, errors.New("source: missing"))
	}
	if c.Type == nil {
		problems = append(problems, errors.New("type: missing"))
	}
	if c.Namespace == ids.WildcardNamespace {
		problems = append(problems, fmt.Errorf("namespace: %q would follow every namespace, but the set is keyed by name: follow one", c.Namespace))
	}
	if c.Changed == nil {
		problems = append(problems, errors.New("changed: missing"))
	}
	if c.Retry.Base <= 0 || c.Retry.Max < c.Retry.Base {
		problems = append(problems, fmt.Errorf("retry: base %v and max %v: want 0 < base <= max", c.Retry.Base, c.Retry.Max))
	}
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("watched set of %s: %w", ids.TypeString(c.Type), err)
	}
	return nil
}

// WatchedSet keeps the current set of the resources of one type in one
// namespace through a watch (a snapshot, then every change) and hands the
// whole set to Changed after each change. A watch that ends (the server
// gone, a watcher cut off for falling behind, a follower not caught up
// yet, or Changed's error) is opened again after a backoff, and its new
// snapshot replaces the set: Changed then sees what is stored, deletions
// made meanwhile included. Between the two, Changed is not called, so
// its caller keeps acting on the last set it was given.
type WatchedSet struct {
	cfg      WatchedSetConfig
	log      *slog.Logger
	synced   chan struct{}
	syncOnce sync.Once
}

// NewWatchedSet returns a WatchedSet; Start runs it.
func NewWatchedSet(cfg WatchedSetConfig) *WatchedSet {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &WatchedSet{cfg: cfg, log: log, synced: make(chan struct{})}
}

// Synced is closed once Changed has accepted the first snapshot.
func (s *WatchedSet) Synced() <-chan struct{} { return s.synced }

// Start follows the type until ctx ends, then returns nil; it returns at
// once, with an error naming the field, when the config is unusable.
func (s *WatchedSet) Start(ctx context.Context) error {
	if err := s.cfg.check(); err != nil {
		return err
	}
	w := backoff.Waiter{Policy: s.cfg.Retry, Rand: s.cfg.Rand}
	for {
		err := s.follow(ctx, w.Reset)
		if ctx.Err() != nil {
			return nil
		}
		wait := w.Next()
		// One break is routine (a leader change, a restart, a follower
		// catching up); a watch that keeps failing is worth a warning.
		level := slog.LevelInfo
		if w.Failures() > 1 {
			level = slog.LevelWarn
		}
		s.log.Log(ctx, level, "watch ended; opening it again",
			"type", ids.TypeString(s.cfg.Type), "err", err, "failures", w.Failures(), "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// follow runs one watch until it fails, calling delivered once its
// snapshot was accepted.
func (s *WatchedSet) follow(ctx context.Context, delivered func()) error {
	w, err := s.cfg.Source.Watch(ctx, &pbresource.WatchListRequest{
		Type:    s.cfg.Type,
		Tenancy: &pbresource.Tenancy{Namespace: s.cfg.Namespace},
	})
	if err != nil {
		return err
	}
	defer w.Close()
	set := map[string]*pbresource.Resource{}
	listed := false
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			return err
		}
		res := ev.GetResource()
		switch ev.GetOp() {
		case pbresource.WatchEvent_OP_UPSERT:
			set[res.GetId().GetName()] = res
		case pbresource.WatchEvent_OP_DELETE:
			delete(set, res.GetId().GetName())
		case pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
			if listed {
				continue // a progress mark: nothing changed
			}
			listed = true
			if err := s.cfg.Changed(set); err != nil {
				return err
			}
			delivered()
			s.syncOnce.Do(func() { close(s.synced) })
			continue
		default:
			continue
		}
		if listed {
			if err := s.cfg.Changed(set); err != nil {
				return err
			}
		}
	}
}
