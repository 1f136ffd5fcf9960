package assignments

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics count how task streams start: whole or resumed, and what the
// resumed ones did not send. A fleet whose streams mostly start whole
// after a server restart or a burst of lost streams is paying the cost
// resume exists to save (older agents, or agents that restarted).
type metrics struct {
	streams     *prometheus.CounterVec
	startEvents *prometheus.CounterVec
	saved       prometheus.Counter
}

// Values of the label start.
const (
	startFull    = "full"
	startResumed = "resumed"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		streams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "trellis", Subsystem: "watch_tasks", Name: "streams_total",
			Help: "Task streams (AgentService.WatchTasks) this server started, by start: full (a whole snapshot: a new or restarted agent, or an older one) or resumed (only what differs from what the agent holds).",
		}, []string{"start"}),
		startEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "trellis", Subsystem: "watch_tasks", Name: "start_events_total",
			Help: "Events this server's task streams sent before their END_OF_SNAPSHOT (tasks and task definitions), by start: full or resumed.",
		}, []string{"start"}),
		saved: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "trellis", Subsystem: "watch_tasks", Name: "events_saved_total",
			Help: "Events resumed task streams did not send that a whole snapshot would have: tasks the agent held at their current version, and task definitions it held.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.streams, m.startEvents, m.saved} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("task stream metrics: %w", err)
		}
	}
	return m, nil
}

// started counts a stream's start: sent events before END_OF_SNAPSHOT,
// saved events a whole snapshot would have added.
func (m *metrics) started(resumed bool, sent, saved int) {
	start := startFull
	if resumed {
		start = startResumed
	}
	m.streams.WithLabelValues(start).Inc()
	m.startEvents.WithLabelValues(start).Add(float64(sent))
	m.saved.Add(float64(saved))
}
