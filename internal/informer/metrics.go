package informer

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"trellis.dev/trellis/internal/ids"
)

// deltaCounts counts a type's deltas by Op (Added, Changed, Removed).
type deltaCounts [Removed + 1]atomic.Uint64

// Collector reports, for each declared type, how many resources the
// informer holds (trellis_informer_objects: what it costs in memory),
// the deltas it handed on (trellis_informer_deltas_total, by op), its
// subscribers (trellis_informer_subscribers) and the index it has applied
// (trellis_informer_index, which a server's store index runs ahead of by
// its informer's lag).
func (in *Informer) Collector() prometheus.Collector { return collector{in: in} }

type collector struct{ in *Informer }

var (
	objectsDesc = prometheus.NewDesc("trellis_informer_objects",
		"Resources held by the informer, by type.", []string{"type"}, nil)
	deltasDesc = prometheus.NewDesc("trellis_informer_deltas_total",
		"Deltas the informer handed to its subscribers' type, by type and op (added, changed, removed): one per change of the cache, whatever the number of subscribers.", []string{"type", "op"}, nil)
	subscribersDesc = prometheus.NewDesc("trellis_informer_subscribers",
		"Subscribers of the informer, by type.", []string{"type"}, nil)
	indexDesc = prometheus.NewDesc("trellis_informer_index",
		"The index up to which the informer has applied every change, by type.", []string{"type"}, nil)
)

func (collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- objectsDesc
	ch <- deltasDesc
	ch <- subscribersDesc
	ch <- indexDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	c.in.mu.Lock()
	states := make([]*typeState, 0, len(c.in.types))
	for _, ts := range c.in.types {
		states = append(states, ts)
	}
	c.in.mu.Unlock()
	for _, ts := range states {
		typ := ids.TypeString(ts.typ)
		ch <- prometheus.MustNewConstMetric(objectsDesc, prometheus.GaugeValue, float64(len(c.in.cache.List(ts.typ))), typ)
		for op := Added; op <= Removed; op++ {
			ch <- prometheus.MustNewConstMetric(deltasDesc, prometheus.CounterValue, float64(ts.deltas[op].Load()), typ, op.String())
		}
		ts.mu.Lock()
		subs := len(ts.subs)
		ts.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(subscribersDesc, prometheus.GaugeValue, float64(subs), typ)
		complete, _, _ := ts.progress()
		ch <- prometheus.MustNewConstMetric(indexDesc, prometheus.GaugeValue, float64(complete), typ)
	}
}
