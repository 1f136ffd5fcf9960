package raft

import (
	"fmt"
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	gmprom "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// libraryMetricsPrefix is the first part of every name hashicorp/raft
// emits through go-metrics here: "raft.commitTime" is exposed as
// trellis_raft_commitTime, as Consul exposes it as consul_raft_commitTime,
// so Consul's dashboards and alerts carry over by changing the prefix.
const libraryMetricsPrefix = "trellis"

// deprecatedPerPeerKeys are the replication metrics hashicorp/raft emits
// twice: once with the peer as a label, once (the old form) with the peer
// id inside the metric's name. The second would make a metric name per
// peer ever seen and carry characters a name may not hold; only the
// labelled form is kept.
var deprecatedPerPeerKeys = []string{
	"raft.replication.heartbeat.",
	"raft.replication.installSnapshot.",
	"raft.replication.appendEntries.rpc.",
	"raft.replication.appendEntries.logs.",
}

var (
	libraryOnce sync.Once
	librarySink prometheus.Collector
	libraryErr  error
)

// LibraryMetrics returns the collector of hashicorp/raft's own metrics
// (commit time, FSM apply time, replication, elections...): register it
// with the process's Prometheus registry.
//
// hashicorp/raft emits through go-metrics' process-wide global, so there
// is one sink per process, installed on the first call: every Raft node of
// the process (several only in tests) adds to the same series, and the
// same collector may be registered with several registries. Before the
// first call the global is go-metrics' default, which discards everything
// (its in-memory sink is not installed, so nothing accumulates).
//
// The go-metrics front is configured for the hot path: no runtime-stats
// goroutine (the registry's Go collector has those), no hostname lookup or
// prefix. Series the sink has not seen updated for an hour are dropped,
// so the labelled series of a peer removed long ago go away.
func LibraryMetrics() (prometheus.Collector, error) {
	libraryOnce.Do(func() {
		sink, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{
			Expiration: time.Hour,
			Name:       "trellis_raft_library_metrics",
			// Registered by the caller, in its own registry.
			Registerer: prometheus.NewRegistry(),
		})
		if err != nil {
			libraryErr = fmt.Errorf("raft library metrics: %w", err)
			return
		}
		cfg := gometrics.DefaultConfig(libraryMetricsPrefix)
		cfg.EnableHostname = false
		cfg.EnableHostnameLabel = false
		cfg.EnableRuntimeMetrics = false
		cfg.EnableTypePrefix = false
		cfg.FilterDefault = true
		cfg.BlockedPrefixes = blockedLibraryKeys()
		if _, err := gometrics.NewGlobal(cfg, sink); err != nil {
			libraryErr = fmt.Errorf("raft library metrics: %w", err)
			return
		}
		librarySink = sink
	})
	return librarySink, libraryErr
}

// blockedLibraryKeys are deprecatedPerPeerKeys as go-metrics' filter sees
// them: joined with dots, after the prefix.
func blockedLibraryKeys() []string {
	out := make([]string, len(deprecatedPerPeerKeys))
	for i, k := range deprecatedPerPeerKeys {
		out[i] = libraryMetricsPrefix + "." + k
	}
	return out
}
