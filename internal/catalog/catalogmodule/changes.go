package catalogmodule

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/informer"
)

// serviceChanges keeps, for each service (catalog.ServiceKey), the index
// of its last change: an instance of it added, changed or removed. It is
// fed by the informer's deltas of ServiceInstances (servicesOf). A
// blocking query on one service then waits for that service to change,
// not for any change of the catalog, and answers with the service's own
// index, as Consul's do: with thousands of instances, a watcher of one
// service is not woken by every other service's health (each service
// waited on has a channel of its own).
type serviceChanges struct {
	mu    sync.Mutex
	last  map[string]uint64
	waits map[string]*serviceWait // the services waited on now
	// waiting counts the blocking queries in wait.
	waiting atomic.Int64
}

// serviceWait is what the blocking queries of one service wait on: moved
// is closed at its next change; waiters count them, so that the last to
// leave drops it.
type serviceWait struct {
	moved   chan struct{}
	waiters int
}

func newServiceChanges() *serviceChanges {
	return &serviceChanges{last: map[string]uint64{}, waits: map[string]*serviceWait{}}
}

// apply takes the services (servicesOf) of one delta of the
// ServiceInstances, seen at index idx, and wakes their waiters.
func (s *serviceChanges) apply(services []string, idx uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range services {
		s.last[k] = max(s.last[k], idx)
		if w := s.waits[k]; w != nil {
			close(w.moved)
			delete(s.waits, k)
		}
	}
}

// of returns the index of the last change of service key (0: none seen).
func (s *serviceChanges) of(key string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last[key]
}

// wait returns once service key has changed after index after, or ctx
// ends.
func (s *serviceChanges) wait(ctx context.Context, key string, after uint64) {
	s.waiting.Add(1)
	defer s.waiting.Add(-1)
	for {
		s.mu.Lock()
		if s.last[key] > after {
			s.mu.Unlock()
			return
		}
		w := s.waits[key]
		if w == nil {
			w = &serviceWait{moved: make(chan struct{})}
			s.waits[key] = w
		}
		w.waiters++
		s.mu.Unlock()
		select {
		case <-w.moved:
		case <-ctx.Done():
		}
		s.mu.Lock()
		if w.waiters--; w.waiters == 0 && s.waits[key] == w {
			delete(s.waits, key)
		}
		s.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
	}
}

// servicesOf returns the services (catalog.ServiceKey) of a delta's
// instance, before and after. An instance's service never changes, but a
// delta names both, in case.
func servicesOf(d informer.Delta) []string {
	var out []string
	for _, o := range []*controller.Object{d.Old, d.New} {
		if o == nil {
			continue
		}
		si, ok := controller.Decoded[*pbcatalog.ServiceInstance](o)
		if !ok || si.GetService() == "" {
			continue
		}
		k := catalog.ServiceKey(o.Resource.GetId().GetTenancy().GetNamespace(), si.GetService())
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}
