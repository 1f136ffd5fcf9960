package informer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/resource"
)

// DefaultRetry paces the watches opened again after a failure.
var DefaultRetry = backoff.Policy{Base: 100 * time.Millisecond, Max: 30 * time.Second}

// Config says where an informer's watches come from.
type Config struct {
	// Source opens the watches: the resource service in process (a
	// server's own store), or an agent's link to the servers.
	Source resource.Watcher
	// Local says Source is this process's own store (a server's resource
	// service): its watches then ask for progress marks, so that the
	// informer's index follows the store's, and a server-sized buffer.
	Local bool
	// ReadIndex, when set, returns the cluster's read index (the leader's
	// applied index, at or above every write it acknowledged), for
	// WaitConsistent. Nil where this process's store is the cluster's (a
	// server in memory): its own index is then the read index.
	ReadIndex func(ctx context.Context) (uint64, error)
	// LocalIndex returns this store's index, for WaitConsistent when
	// ReadIndex is nil.
	LocalIndex func() uint64
	// Retry paces the watches opened again after a failure (DefaultRetry
	// when zero); Rand draws its jitter (math/rand/v2's Float64; nil waits
	// the full backoff.Policy.Ceiling).
	Retry  backoff.Policy
	Rand   func() float64
	Logger *slog.Logger // discards when nil
	// CheckReadOnly makes the cache catch a consumer that modifies a
	// shared object (controller.CheckReadOnly; Verify); for tests.
	CheckReadOnly bool
}

// Informer is an indexed local cache of the declared types, fed by one
// watch per type; see the package comment.
type Informer struct {
	cfg   Config
	log   *slog.Logger
	cache *controller.Cache

	mu      sync.Mutex
	types   map[string]*typeState // by ids.TypeString
	started bool
	// onDemand are the declared types followed only once a consumer asks
	// (Follow); following holds those it asked for. ctx is Start's, while
	// it runs; stopped once it has ended; late counts the followers Follow
	// started after Start.
	onDemand  map[string]bool
	following map[string]bool
	ctx       context.Context
	stopped   bool
	late      sync.WaitGroup
}

// ErrStarted is returned by Declare once the informer has started.
var ErrStarted = errors.New("informer: types are declared before Start")

// ErrNotDeclared names a read of a type no consumer declared.
var ErrNotDeclared = errors.New("informer: type not declared")

// New returns an informer over cfg.Source with no types; consumers
// Declare theirs before Start.
func New(cfg Config) (*Informer, error) {
	if cfg.Source == nil {
		return nil, errors.New("informer: source: missing")
	}
	if cfg.Retry == (backoff.Policy{}) {
		cfg.Retry = DefaultRetry
	}
	if cfg.Retry.Base <= 0 || cfg.Retry.Max < cfg.Retry.Base {
		return nil, fmt.Errorf("informer: retry: base %v and max %v: want 0 < base <= max", cfg.Retry.Base, cfg.Retry.Max)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var opts []controller.CacheOption
	if cfg.CheckReadOnly {
		opts = append(opts, controller.CheckReadOnly())
	}
	return &Informer{cfg: cfg, log: log, cache: controller.NewCache(opts...), types: make(map[string]*typeState),
		onDemand: make(map[string]bool), following: make(map[string]bool)}, nil
}

// Verify reports, under Config.CheckReadOnly, the first cached object a
// consumer has modified (nil without it).
func (in *Informer) Verify() error { return in.cache.Verify() }

// Declare adds the types a consumer follows, with the indexes it looks
// them up by, all or none. Consumers that declare the same type share its
// watch; an index is declared by its pointer, as in controller.Cache.
// Declaring is refused once the informer has started (ErrStarted).
func (in *Informer) Declare(types ...controller.CachedType) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.started {
		return ErrStarted
	}
	if err := in.cache.Declare(types...); err != nil {
		return fmt.Errorf("informer: %w", err)
	}
	for _, ct := range types {
		k := ids.TypeString(ct.Type)
		if in.types[k] == nil {
			in.types[k] = newTypeState(in, ct.Type)
		}
		delete(in.onDemand, k) // a consumer follows it from Start
	}
	return nil
}

// DeclareOnDemand declares types as Declare does, but the informer opens
// their watches only once a consumer calls Follow: a component that needs
// them for some tasks only (the proxy's, for mesh tasks) costs an agent
// without such a task no watch on the servers. Until then they read as
// empty and not synced.
func (in *Informer) DeclareOnDemand(types ...controller.CachedType) error {
	in.mu.Lock()
	fresh := map[string]bool{}
	for _, ct := range types {
		if k := ids.TypeString(ct.Type); in.types[k] == nil || in.onDemand[k] {
			fresh[k] = true
		}
	}
	in.mu.Unlock()
	if err := in.Declare(types...); err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for k := range fresh { // a type declared before stays followed from Start
		in.onDemand[k] = true
	}
	return nil
}

// Follow opens the watches of types declared on demand (the others are
// followed from Start anyway): at once while Start runs, at Start before
// it. Asking again, or for a type followed already, does nothing. A type
// not declared is refused.
func (in *Informer) Follow(types ...*pbresource.Type) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, typ := range types {
		k := ids.TypeString(typ)
		ts := in.types[k]
		if ts == nil {
			return fmt.Errorf("%w: %s", ErrNotDeclared, k)
		}
		if !in.onDemand[k] {
			continue
		}
		delete(in.onDemand, k)
		in.following[k] = true
		if in.ctx == nil || in.stopped {
			continue // Start follows it, or has ended
		}
		in.late.Add(1)
		go func() {
			defer in.late.Done()
			ts.run(in.ctx)
		}()
	}
	return nil
}

// Start follows every declared type, but those declared on demand and not
// yet asked for (Follow), until ctx ends, then returns nil.
func (in *Informer) Start(ctx context.Context) error {
	in.mu.Lock()
	in.started = true
	in.ctx = ctx
	states := make([]*typeState, 0, len(in.types))
	for k, ts := range in.types {
		if !in.onDemand[k] {
			states = append(states, ts)
		}
	}
	in.mu.Unlock()
	var wg sync.WaitGroup
	for _, ts := range states {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts.run(ctx)
		}()
	}
	<-ctx.Done()
	wg.Wait()
	in.mu.Lock()
	in.stopped = true
	in.mu.Unlock()
	in.late.Wait()
	return nil
}

func (in *Informer) state(typ *pbresource.Type) (*typeState, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	ts := in.types[ids.TypeString(typ)]
	if ts == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotDeclared, ids.TypeString(typ))
	}
	return ts, nil
}

func (in *Informer) mustState(typ *pbresource.Type) *typeState {
	ts, err := in.state(typ)
	if err != nil {
		panic(err.Error())
	}
	return ts
}

// Get returns the cached resource of id's type, namespace and name (and
// uid, when id has one); nil when there is none. The object is shared:
// never modify it. It panics when the type is not declared.
func (in *Informer) Get(id *pbresource.ID) *controller.Object {
	in.mustState(id.GetType())
	return in.cache.Get(id)
}

// List returns every cached resource of typ, ordered by namespace and
// name; shared like controller.Cache.List's. It panics when the type is
// not declared.
func (in *Informer) List(typ *pbresource.Type) []*controller.Object {
	in.mustState(typ)
	return in.cache.List(typ)
}

// ByIndex returns the cached resources of typ filed under key in the
// named index, ordered by namespace and name; shared like
// controller.Cache.ByIndex's. It panics when the type or the index is not
// declared.
func (in *Informer) ByIndex(typ *pbresource.Type, index, key string) []*controller.Object {
	in.mustState(typ)
	return in.cache.ByIndex(typ, index, key)
}

// Synced reports whether typ has been listed whole into the cache.
func (in *Informer) Synced(typ *pbresource.Type) bool {
	ts, err := in.state(typ)
	if err != nil {
		return false
	}
	_, synced, _ := ts.progress()
	return synced
}

// Index returns the index up to which every change of typ has been
// applied (0 before its first listing is in).
func (in *Informer) Index(typ *pbresource.Type) uint64 {
	ts, err := in.state(typ)
	if err != nil {
		return 0
	}
	idx, _, _ := ts.progress()
	return idx
}

// LastChange returns the index of typ's last change the cache took (an
// addition, change or removal), which a blocking query answers with
// (Consul's X-Consul-Index) and waits past (WaitChange).
func (in *Informer) LastChange(typ *pbresource.Type) uint64 {
	ts, err := in.state(typ)
	if err != nil {
		return 0
	}
	_, _, last := ts.progress()
	return last
}
