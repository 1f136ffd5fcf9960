package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/storage"
)

// DefaultTTL is how long an instance may stay silent before it is marked
// down, unless the server is configured otherwise.
const DefaultTTL = 10 * time.Second

// FailoverTTLFactor: a new leader gives every instance at least this many
// TTLs from its takeover. A fleet that was talking to the old leader needs
// a moment to find the new one, and the new one's first seconds are its
// busiest (every agent's heartbeat and task stream arrive at once).
const FailoverTTLFactor = 3

// MinTTL is the shortest TTL a server accepts: shorter ones cannot be met
// over a network by agents that heartbeat a third of it apart.
const MinTTL = 100 * time.Millisecond

// Clock tells the time. The Tracker reads it for every heartbeat and every
// verdict, so tests decide what time it is.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// InstanceReader reads Instance resources: the resource service, on the
// leader, whose local copy holds every acknowledged write.
type InstanceReader interface {
	Read(context.Context, *pbresource.ReadRequest) (*pbresource.ReadResponse, error)
}

// Config is what a Tracker needs.
type Config struct {
	// TTL: an instance not heard from for this long is expired (DefaultTTL
	// when zero).
	TTL time.Duration
	// FailoverTTL is how long every instance has at least from the moment
	// this server becomes the leader (FailoverTTLFactor times the TTL when
	// zero).
	FailoverTTL time.Duration
	// Instances reads the stored Instances, for heartbeats the Tracker
	// cannot judge from memory. Required.
	Instances InstanceReader
	// Leadership says when this server is the leader. Required by Start.
	Leadership storage.Leadership
	// Clock; nil is the real one.
	Clock Clock
	// Registerer receives the heartbeat metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger; nil discards.
	Logger *slog.Logger
}

// Tracker keeps, on the leader and in memory only, when each instance was
// last heard from. Heartbeats update it; the instance controller asks it
// for verdicts (Observe) and tells it when an instance stops being alive
// in the store (Forget). Nothing it holds is written to the store: a new
// leader starts empty and gives every instance a full TTL.
type Tracker struct {
	ttl         time.Duration
	failoverTTL time.Duration
	clock       Clock
	store       InstanceReader
	leadership  storage.Leadership
	log         *slog.Logger
	metrics     *metrics

	mu     sync.Mutex
	active bool
	// termStart is when this term began.
	termStart time.Time
	// stalls measures how long this process could not run (lateness.go),
	// from a real ticker when measureStalls (the real clock: a ticker
	// cannot be read against a clock a test moves).
	stalls        stallMeter
	measureStalls bool
	// fleetLate is FleetLateness as of fleetAt.
	fleetLate time.Duration
	fleetAt   time.Time
	// entries are the instances the controller observed alive in this term.
	entries map[string]*entry
}

// entry is one instance the instance controller observed as ready or
// draining with a session.
type entry struct {
	session   string
	lastHeard time.Time
	// stalledAt is the stall meter's total when lastHeard was set.
	stalledAt time.Duration
	// expired is set when a verdict found the instance expired: from then
	// on heartbeats of this session are refused while the controller marks
	// it down. expiredVersion is the version of the Instance judged; a
	// later version (the instance was written since) earns a fresh TTL.
	expired        bool
	expiredVersion string
}

// NewTracker returns a Tracker, inactive until Start sees leadership.
func NewTracker(cfg Config) (*Tracker, error) {
	if cfg.Instances == nil {
		return nil, errors.New("heartbeat tracker: Config.Instances is required")
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < MinTTL {
		return nil, fmt.Errorf("heartbeat tracker: TTL %s is below the minimum of %s", cfg.TTL, MinTTL)
	}
	if cfg.FailoverTTL == 0 {
		cfg.FailoverTTL = FailoverTTLFactor * cfg.TTL
	}
	measureStalls := cfg.Clock == nil
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	t := &Tracker{
		ttl: cfg.TTL, failoverTTL: cfg.FailoverTTL, clock: cfg.Clock, store: cfg.Instances, leadership: cfg.Leadership,
		log: cfg.Logger, entries: map[string]*entry{},
		stalls: stallMeter{interval: stallInterval, tolerance: stallTolerance}, measureStalls: measureStalls,
	}
	m, err := newMetrics(cfg.Registerer, t.tracked)
	if err != nil {
		return nil, err
	}
	t.metrics = m
	return t, nil
}

// TTL is how long an instance may stay silent.
func (t *Tracker) TTL() time.Duration { return t.ttl }

// Start follows the leadership until ctx ends: the Tracker is active, and
// starts empty, each time this server becomes the leader, and forgets
// everything when it stops being one.
func (t *Tracker) Start(ctx context.Context) error {
	if t.leadership == nil {
		return errors.New("heartbeat tracker: Config.Leadership is required to Start")
	}
	defer t.setActive(false)
	ch := t.leadership.LeaderCh()
	var tick <-chan time.Time // nil: never
	if t.measureStalls {
		ticks := time.NewTicker(stallInterval)
		defer ticks.Stop()
		tick = ticks.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			t.mu.Lock()
			t.stalls.tick(t.clock.Now())
			t.mu.Unlock()
		case leader, ok := <-ch:
			if !ok {
				ch, leader = nil, false
			}
			t.setActive(leader)
		}
	}
}

// setActive starts or ends a term. Either way the entries start empty:
// what a previous term heard is not this term's business, and an instance
// first observed now gets a whole TTL from now.
func (t *Tracker) setActive(active bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.active == active {
		return
	}
	t.active = active
	t.entries = map[string]*entry{}
	t.termStart = t.clock.Now()
	if active {
		t.log.Info("heartbeat tracker active: every live instance has at least the failover TTL from now", "ttl", t.ttl, "failover_ttl", t.failoverTTL)
	} else {
		t.log.Info("heartbeat tracker inactive: this server no longer leads")
	}
}

// Active reports whether this server keeps the heartbeats now.
func (t *Tracker) Active() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.active
}

func (t *Tracker) tracked() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return float64(len(t.entries))
}

// Heartbeat records that instance's agent, in session, is alive. It
// returns nil when the heartbeat is taken, ErrNotLeader when this server
// does not keep heartbeats now, a refusal (see Reason) when the agent must
// register again, or a gRPC status error when the store could not be read.
//
// A heartbeat never makes an instance alive by itself: it only extends an
// instance the store already calls ready or draining, with that session.
// Only the instance controller adds instances to the Tracker (Observe),
// from what it read in the store, so a heartbeat racing with a change of
// the Instance cannot bring back what the controller has just marked down.
func (t *Tracker) Heartbeat(ctx context.Context, instance, session string) error {
	return t.HeartbeatHeard(ctx, instance, session, 0)
}

// HeartbeatHeard is Heartbeat for a heartbeat that waited on a follower
// for waited before the leader took it: it counts as heard then (at most a
// TTL ago), so that the servers' own delays never make a live instance
// look silent.
func (t *Tracker) HeartbeatHeard(ctx context.Context, instance, session string, waited time.Duration) error {
	t.mu.Lock()
	if !t.active {
		t.mu.Unlock()
		return ErrNotLeader
	}
	if e := t.entries[instance]; e != nil && e.session == session {
		if e.expired {
			t.mu.Unlock()
			t.metrics.heartbeats.WithLabelValues(resultRefused).Inc()
			return refusal(ReasonDown, instance, Registration{}, session, t.ttl)
		}
		if heard := heardAt(t.clock.Now(), waited, t.ttl); heard.After(e.lastHeard) {
			e.lastHeard, e.stalledAt = heard, t.stalls.total
		}
		t.mu.Unlock()
		t.metrics.heartbeats.WithLabelValues(resultOK).Inc()
		return nil
	}
	t.mu.Unlock()

	// Not observed yet in this term (a new leader, a new registration the
	// controller has not seen) or another session: the store decides. An
	// accepted heartbeat changes nothing here; the controller's first
	// verdict on this registration gives it a whole TTL anyway.
	reg, err := t.registration(ctx, instance)
	if err != nil {
		t.metrics.heartbeats.WithLabelValues(resultError).Inc()
		return err
	}
	if r := Admit(reg, session); r != "" {
		t.metrics.heartbeats.WithLabelValues(resultRefused).Inc()
		return refusal(r, instance, reg, session, t.ttl)
	}
	t.metrics.heartbeats.WithLabelValues(resultOK).Inc()
	return nil
}

// registration reads what the store says of instance.
func (t *Tracker) registration(ctx context.Context, instance string) (Registration, error) {
	resp, err := t.store.Read(ctx, &pbresource.ReadRequest{Id: orchestrator.InstanceID(instance)})
	if status.Code(err) == codes.NotFound {
		return Registration{}, nil
	}
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return Registration{}, err
		}
		return Registration{}, status.Errorf(codes.Unavailable, "reading instance %q: %v", instance, err)
	}
	in, err := orchestrator.DecodeInstance(resp.GetResource())
	if err != nil {
		return Registration{}, status.Errorf(codes.Internal, "instance %q: %v", instance, err)
	}
	return Registration{Found: true, Status: in.GetStatus(), Session: in.GetSession()}, nil
}

// Observe is the instance controller's question about an Instance it read
// as ready or draining, with session, at version: is it expired? An
// instance first observed in this term, or observed with a new session,
// gets a whole TTL from now. A verdict of expired is final for that
// version: heartbeats of the session are refused from then on, so the
// controller can mark it down without a heartbeat slipping in between;
// observed again at another version (someone wrote the Instance since), it
// gets a fresh TTL instead. Observe fails with ErrNotLeader while the
// Tracker is inactive.
func (t *Tracker) Observe(instance, session, version string) (Liveness, error) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.active {
		return Liveness{}, ErrNotLeader
	}
	e := t.entries[instance]
	switch {
	case e == nil || e.session != session:
		e = &entry{session: session, lastHeard: now, stalledAt: t.stalls.total}
		t.entries[instance] = e
	case e.expired && e.expiredVersion != version:
		e.expired, e.expiredVersion, e.lastHeard, e.stalledAt = false, "", now, t.stalls.total
	}
	l := JudgeLate(e.lastHeard, now, t.ttl, Lateness{
		TermStart: t.termStart, FailoverTTL: t.failoverTTL, Stalled: t.stalls.total - e.stalledAt,
		Fleet: t.fleetLateness(now),
	})
	if l.Expired && !e.expired {
		e.expired, e.expiredVersion = true, version
		t.metrics.expired.Inc()
	}
	return l, nil
}

// fleetLateness is FleetLateness over the live entries, computed at most
// every fleetEvery. t.mu is held.
func (t *Tracker) fleetLateness(now time.Time) time.Duration {
	if !t.fleetAt.IsZero() && now.Sub(t.fleetAt) < fleetEvery && !now.Before(t.fleetAt) {
		return t.fleetLate
	}
	silences := make([]time.Duration, 0, min(len(t.entries), fleetSample))
	for _, e := range t.entries { // in Go's random order: a sample
		if len(silences) == fleetSample {
			break
		}
		if !e.expired {
			silences = append(silences, now.Sub(e.lastHeard))
		}
	}
	late := FleetLateness(silences, t.ttl)
	if late > 0 && t.fleetLate == 0 {
		t.log.Warn("the fleet's heartbeats are late as a whole: the servers are behind, so every instance's deadline is extended", "lateness", late, "sampled", len(silences))
	}
	t.fleetLate, t.fleetAt = late, now
	t.metrics.fleetLateness.Set(late.Seconds())
	return late
}

// Forget drops an instance the store no longer calls alive (down, left or
// removed). Its heartbeats are then judged by the store again, which
// refuses them until the agent registers anew.
func (t *Tracker) Forget(instance string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.entries, instance)
}

// Now is the Tracker's clock's time.
func (t *Tracker) Now() time.Time { return t.clock.Now() }

// Result labels of the heartbeats_total metric.
const (
	resultOK        = "ok"
	resultRefused   = "refused"
	resultForwarded = "forwarded"
	resultError     = "error"
)

// Result labels of the forward_batches_total metric.
const (
	batchOK     = "ok"
	batchFailed = "failed"
)

type metrics struct {
	heartbeats *prometheus.CounterVec
	expired    prometheus.Counter
	// fleetLateness is the last FleetLateness, in seconds.
	fleetLateness prometheus.Gauge
	// forwardBatches and forwardBatchSize count a follower's batches of
	// forwarded heartbeats (the heartbeats themselves are counted by
	// heartbeats, result "forwarded").
	forwardBatches   *prometheus.CounterVec
	forwardBatchSize prometheus.Histogram
	// answerSeconds is how long this server took to answer each heartbeat
	// it received from an agent, by how: kept here (the leader) or
	// forwarded to the leader.
	answerSeconds *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer, tracked func() float64) (*metrics, error) {
	m := &metrics{
		heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "trellis", Subsystem: "heartbeat", Name: "requests_total",
			Help: "Heartbeats handled by this server, by result (ok, refused, forwarded to the leader, error).",
		}, []string{"result"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "trellis", Subsystem: "heartbeat", Name: "expired_total",
			Help: "Instances found with no heartbeat for a whole TTL, while this server led.",
		}),
		fleetLateness: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "trellis", Subsystem: "heartbeat", Name: "fleet_lateness_seconds",
			Help: "How late the fleet's heartbeats are as a whole (the median instance's silence beyond a sixth of the TTL), added to every instance's deadline.",
		}),
		forwardBatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "trellis", Subsystem: "heartbeat", Name: "forward_batches_total",
			Help: "Batches of heartbeats this server, as a follower, forwarded to the leader, by result (ok, failed: every heartbeat of it answered Unavailable).",
		}, []string{"result"}),
		forwardBatchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "trellis", Subsystem: "heartbeat", Name: "forward_batch_size",
			Help:    "Heartbeats in each batch this server, as a follower, forwarded to the leader.",
			Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000},
		}),
		answerSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "trellis", Subsystem: "heartbeat", Name: "answer_seconds",
			Help:    "How long this server took to answer an agent's heartbeat, by path (kept: this server leads; forwarded: to the leader), whatever the answer. Answers later than a quarter of the TTL are slow for the agent, which keeps the server and counts them when they come.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"path"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.heartbeats, m.expired, m.fleetLateness, m.forwardBatches, m.forwardBatchSize, m.answerSeconds, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "trellis", Subsystem: "heartbeat", Name: "tracked_instances",
		Help: "Live instances whose heartbeats this server, as leader, keeps.",
	}, tracked)} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("heartbeat metrics: %w", err)
		}
	}
	return m, nil
}
