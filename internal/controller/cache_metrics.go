package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	"trellis.dev/trellis/internal/ids"
)

// cacheCollector reports how many resources of each type the cache holds:
// what the opt-in cache costs the leader is what operators watch its
// memory for.
type cacheCollector struct {
	cache *Cache
	desc  *prometheus.Desc
}

func newCacheCollector(c *Cache) cacheCollector {
	return cacheCollector{cache: c, desc: prometheus.NewDesc(
		"trellis_controller_cache_objects",
		"Resources held, decoded, in the controllers' cache, by type (only the types a controller caches).",
		[]string{"type"}, nil,
	)}
}

func (cc cacheCollector) Describe(ch chan<- *prometheus.Desc) { ch <- cc.desc }

func (cc cacheCollector) Collect(ch chan<- prometheus.Metric) {
	for _, tc := range cc.cache.cachedTypes() {
		tc.mu.RLock()
		n := len(tc.all.members)
		tc.mu.RUnlock()
		ch <- prometheus.MustNewConstMetric(cc.desc, prometheus.GaugeValue, float64(n), ids.TypeString(tc.typ))
	}
}
