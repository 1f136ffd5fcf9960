package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	"trellis.dev/trellis/internal/ids"
)

// cacheCollector reports how many resources of each type the cache holds
// (what the opt-in cache costs the leader is what operators watch its
// memory for), and what it did with the events it was given: how many
// changed it and how many it took as repeats, by where they came from
// (the watches, a controller's writes through SeeingWrites, Cache.Apply
// by hand). The second is a count to compare runs by: each change is
// decoded, filed and derived, and a controller's write seen through
// SeeingWrites shows as one change from "write" and one repeat from
// "watch".
type cacheCollector struct {
	cache  *Cache
	desc   *prometheus.Desc
	events *prometheus.Desc
}

func newCacheCollector(c *Cache) cacheCollector {
	return cacheCollector{cache: c, desc: prometheus.NewDesc(
		"trellis_controller_cache_objects",
		"Resources held, decoded, in the controllers' cache, by type (only the types a controller caches).",
		[]string{"type"}, nil,
	), events: prometheus.NewDesc(
		"trellis_controller_cache_events_total",
		"Events given to the controllers' cache, by type, source (watch, write: a controller's write seen through SeeingWrites, apply: by hand) and result (changed: decoded, filed and derived; repeat: nothing new, an older or the same version, or a deletion of what is not cached).",
		[]string{"type", "source", "result"}, nil,
	)}
}

func (cc cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- cc.desc
	ch <- cc.events
}

func (cc cacheCollector) Collect(ch chan<- prometheus.Metric) {
	for _, tc := range cc.cache.cachedTypes() {
		tc.mu.RLock()
		n := len(tc.all.members)
		tc.mu.RUnlock()
		typ := ids.TypeString(tc.typ)
		ch <- prometheus.MustNewConstMetric(cc.desc, prometheus.GaugeValue, float64(n), typ)
		for from := range numSources {
			for changed, result := range []string{"repeat", "changed"} {
				ch <- prometheus.MustNewConstMetric(cc.events, prometheus.CounterValue, float64(tc.events[from][changed].Load()), typ, from.String(), result)
			}
		}
	}
}
