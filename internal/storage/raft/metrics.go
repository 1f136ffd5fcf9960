package raft

import (
	"strconv"

	hraft "github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics is the backend's prometheus.Collector: Raft's state read at
// scrape time, and latency histograms kept as requests happen.
type metrics struct {
	b *Backend

	apply       *prometheus.HistogramVec
	applyErrors *prometheus.CounterVec
	forward     *prometheus.HistogramVec

	state, term, lastIndex, commitIndex, appliedIndex, snapshotIndex, voters, leader, storeIndex, commitNudges *prometheus.Desc
}

var raftStates = []hraft.RaftState{hraft.Follower, hraft.Candidate, hraft.Leader, hraft.Shutdown}

func newMetrics(b *Backend) *metrics {
	latency := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	return &metrics{
		b: b,
		apply: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "trellis_raft_apply_duration_seconds",
			Help:    "Time from handing a command to Raft on the leader until it was committed and applied, by operation.",
			Buckets: latency,
		}, []string{"op"}),
		applyErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trellis_raft_apply_errors_total",
			Help: "Commands Raft failed on the leader (not committed or outcome unknown), by operation.",
		}, []string{"op"}),
		forward: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "trellis_raft_forward_duration_seconds",
			Help:    "Time a follower spent forwarding a request to the leader, by RPC.",
			Buckets: latency,
		}, []string{"rpc"}),
		state:         prometheus.NewDesc("trellis_raft_state", "1 for this server's current Raft state, 0 for the others.", []string{"state"}, nil),
		term:          prometheus.NewDesc("trellis_raft_term", "Current Raft term.", nil, nil),
		lastIndex:     prometheus.NewDesc("trellis_raft_last_log_index", "Index of the last entry in this server's Raft log.", nil, nil),
		commitIndex:   prometheus.NewDesc("trellis_raft_commit_index", "Latest Raft index this server knows to be committed.", nil, nil),
		appliedIndex:  prometheus.NewDesc("trellis_raft_applied_index", "Latest Raft index applied to this server's state.", nil, nil),
		snapshotIndex: prometheus.NewDesc("trellis_raft_last_snapshot_index", "Raft index of this server's latest snapshot.", nil, nil),
		voters:        prometheus.NewDesc("trellis_raft_voters", "Voters in this server's latest Raft configuration.", nil, nil),
		leader:        prometheus.NewDesc("trellis_raft_leader", "1 when this server is the leader and has caught up.", nil, nil),
		storeIndex:    prometheus.NewDesc("trellis_store_index", "Index of the last change applied to the resource store.", nil, nil),
		commitNudges:  prometheus.NewDesc("trellis_raft_commit_nudges_total", "Barriers this server appended as the leader to tell followers of a commit at once, after the last write of a burst.", nil, nil),
	}
}

// Metrics returns the backend's Prometheus collector; register it with the
// process's registry.
func (b *Backend) Metrics() prometheus.Collector { return b.metrics }

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.state, m.term, m.lastIndex, m.commitIndex, m.appliedIndex, m.snapshotIndex, m.voters, m.leader, m.storeIndex, m.commitNudges} {
		ch <- d
	}
	m.apply.Describe(ch)
	m.applyErrors.Describe(ch)
	m.forward.Describe(ch)
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	r := m.b.raft
	cur := r.State()
	for _, s := range raftStates {
		v := 0.0
		if s == cur {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(m.state, prometheus.GaugeValue, v, s.String())
	}
	gauge := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	gauge(m.term, r.CurrentTerm())
	gauge(m.lastIndex, r.LastIndex())
	gauge(m.commitIndex, r.CommitIndex())
	gauge(m.appliedIndex, r.AppliedIndex())
	snap, _ := strconv.ParseUint(r.Stats()["last_snapshot_index"], 10, 64)
	gauge(m.snapshotIndex, snap)
	voters := 0
	if f := r.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == hraft.Voter {
				voters++
			}
		}
	}
	gauge(m.voters, uint64(voters))
	leader := uint64(0)
	if cur == hraft.Leader && m.b.lead.readyIn(r.CurrentTerm()) {
		leader = 1
	}
	gauge(m.leader, leader)
	gauge(m.storeIndex, m.b.store.Index())
	if n := m.b.nudge; n != nil {
		ch <- prometheus.MustNewConstMetric(m.commitNudges, prometheus.CounterValue, float64(n.count.Load()))
	}
	m.apply.Collect(ch)
	m.applyErrors.Collect(ch)
	m.forward.Collect(ch)
}
