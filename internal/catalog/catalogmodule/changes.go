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
// fed by the informer's deltas of ServiceInstances (servicesOf). A blocking query on
// one service then waits for that service to change, not for any change
// of the catalog, and answers with the service's own index, as Consul's
// do: with thousands of instances, a watcher of one service is not woken
// by every other service's health.
type serviceChanges struct {
	mu    sync.Mutex
	last  map[string]uint64
	moved chan struct{} // closed, and replaced, at every change
	// waiting counts the blocking queries in wait.
	waiting atomic.Int64
}

func newServiceChanges() *serviceChanges {
	return &serviceChanges{last: map[string]uint64{}, moved: make(chan struct{})}
}

// apply takes the services (servicesOf) of one delta of the
// ServiceInstances, seen at index idx.
func (s *serviceChanges) apply(services []string, idx uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range services {
		s.last[k] = max(s.last[k], idx)
	}
	close(s.moved)
	s.moved = make(chan struct{})
}

// of returns the index of the last change of service key (0: none seen),
// and a channel closed at the next change of any service.
func (s *serviceChanges) of(key string) (uint64, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last[key], s.moved
}

// wait returns once service key has changed after index after, or ctx
// ends.
func (s *serviceChanges) wait(ctx context.Context, key string, after uint64) {
	s.waiting.Add(1)
	defer s.waiting.Add(-1)
	for {
		idx, moved := s.of(key)
		if idx > after {
			return
		}
		select {
		case <-moved:
		case <-ctx.Done():
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
