package catalogmodule

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultAnswerCacheBytes bounds the encoded answers a server keeps for
// sharing (answerCache).
const DefaultAnswerCacheBytes = 64 << 20

// answerCache shares the encoded answers of the reads of one service
// (GET /v1/health/service/{name}, /v1/catalog/service/{name}): a change
// of a service wakes every blocking query that waits on it, a thousand
// watchers of one service each ask the same thing at the same index, and
// the first to ask builds and encodes the answer that the others write
// as is. An answer is kept for its service's current indexes only: the
// service's change evicts its answers (evict), a newer answer replaces an
// older one, and the whole is bounded by maxBytes.
type answerCache struct {
	maxBytes int

	mu        sync.Mutex
	byService map[string]map[answerKey]*sharedAnswer // by catalog.ServiceKey
	bytes     int                                    // of the built answers held

	// served counts the answers written, built those built and encoded
	// (the rest shared one).
	served, built atomic.Uint64
}

// answerKey is what, beside its service and indexes, an answer depends
// on: the route and the query's filters.
type answerKey struct {
	route   string // "health" or "catalog"
	passing bool
	tags    string // the tags asked for, sorted, without repeats, joined by NUL
}

// newAnswerKey is the key of route's answer to q.
func newAnswerKey(route string, q consulQuery) answerKey {
	tags := slices.Clone(q.tags)
	slices.Sort(tags)
	return answerKey{route: route, passing: q.passing, tags: strings.Join(slices.Compact(tags), "\x00")}
}

// answerIndexes are the indexes an answer was built at: its service's
// last change and, on a server that has them, the Instances' (the nodes
// the answer shows).
type answerIndexes struct{ service, nodes uint64 }

// atOrAfter reports whether a is at or after b on both indexes.
func (a answerIndexes) atOrAfter(b answerIndexes) bool {
	return a.service >= b.service && a.nodes >= b.nodes
}

// sharedAnswer is one answer, built once; done is closed once body is
// set, or left nil when building it failed.
type sharedAnswer struct {
	at   answerIndexes
	done chan struct{}
	body []byte
	size int // counted in answerCache.bytes; 0 until built
}

func newAnswerCache(maxBytes int) *answerCache {
	return &answerCache{maxBytes: maxBytes, byService: map[string]map[answerKey]*sharedAnswer{}}
}

// get returns the encoded answer of key for service at indexes at: the
// one an earlier request at the same indexes built (waiting for it while
// it is being built), or the one build returns now. The body is shared:
// never modify it.
func (c *answerCache) get(service string, key answerKey, at answerIndexes, build func() ([]byte, error)) ([]byte, error) {
	c.served.Add(1)
	c.mu.Lock()
	held := c.byService[service][key]
	if held != nil && held.at == at {
		c.mu.Unlock()
		<-held.done
		if held.body != nil {
			return held.body, nil
		}
		return c.build(build) // its builder failed: try again, unshared
	}
	if held != nil && !at.atOrAfter(held.at) {
		// A request that read its indexes before a newer answer was
		// built: build its own, and keep the newer.
		c.mu.Unlock()
		return c.build(build)
	}
	mine := &sharedAnswer{at: at, done: make(chan struct{})}
	if held != nil {
		c.bytes -= held.size
	}
	if c.byService[service] == nil {
		c.byService[service] = map[answerKey]*sharedAnswer{}
	}
	c.byService[service][key] = mine
	c.mu.Unlock()
	return c.fill(service, key, mine, build)
}

// fill builds a's body, then counts it and holds the cache to its bound;
// a is done whatever happens, so that no request waits on it for ever.
func (c *answerCache) fill(service string, key answerKey, a *sharedAnswer, build func() ([]byte, error)) ([]byte, error) {
	defer close(a.done)
	body, err := c.build(build)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byService[service][key] != a {
		// Evicted or replaced meanwhile: its waiters have it; the cache
		// does not hold it.
		a.body = body
		return body, err
	}
	if err != nil {
		c.remove(service, key)
		return nil, err
	}
	a.body, a.size = body, len(body)
	c.bytes += a.size
	c.trim()
	return body, nil
}

func (c *answerCache) build(build func() ([]byte, error)) ([]byte, error) {
	c.built.Add(1)
	return build()
}

// remove drops service's answer of key; c.mu is held.
func (c *answerCache) remove(service string, key answerKey) {
	answers := c.byService[service]
	if a := answers[key]; a != nil {
		c.bytes -= a.size
		delete(answers, key)
	}
	if len(answers) == 0 {
		delete(c.byService, service)
	}
}

// trim drops answers, any, until the cache is within its bound; c.mu is
// held.
func (c *answerCache) trim() {
	for service, answers := range c.byService {
		if c.bytes <= c.maxBytes {
			return
		}
		for key := range answers {
			c.remove(service, key)
		}
	}
}

// evict drops the answers of services (catalog.ServiceKey), which have
// changed.
func (c *answerCache) evict(services []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, service := range services {
		for key := range c.byService[service] {
			c.remove(service, key)
		}
	}
}

// answerCollector reports the shared answers and the blocking queries
// waiting for a service to change.
type answerCollector struct {
	answers *answerCache
	changes *serviceChanges
}

var (
	answersDesc = prometheus.NewDesc("trellis_consul_answers_total",
		"Answers of the Consul-compatible reads of one service (GET /v1/health/service/{name}, /v1/catalog/service/{name}).", nil, nil)
	answersBuiltDesc = prometheus.NewDesc("trellis_consul_answers_built_total",
		"Of trellis_consul_answers_total, the answers built and encoded; the others were shared from an earlier request for the same service, query and index.", nil, nil)
	answersBytesDesc = prometheus.NewDesc("trellis_consul_answers_cached_bytes",
		"Encoded answers held for sharing, in bytes.", nil, nil)
	blockingDesc = prometheus.NewDesc("trellis_consul_blocking_queries",
		"Consul blocking queries of one service waiting for it to change.", nil, nil)
)

func (answerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- answersDesc
	ch <- answersBuiltDesc
	ch <- answersBytesDesc
	ch <- blockingDesc
}

func (a answerCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(answersDesc, prometheus.CounterValue, float64(a.answers.served.Load()))
	ch <- prometheus.MustNewConstMetric(answersBuiltDesc, prometheus.CounterValue, float64(a.answers.built.Load()))
	a.answers.mu.Lock()
	held := a.answers.bytes
	a.answers.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(answersBytesDesc, prometheus.GaugeValue, float64(held))
	ch <- prometheus.MustNewConstMetric(blockingDesc, prometheus.GaugeValue, float64(a.changes.waiting.Load()))
}
