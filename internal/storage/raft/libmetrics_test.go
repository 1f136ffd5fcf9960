package raft

import (
	"testing"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/prometheus/client_golang/prometheus"
)

// What hashicorp/raft emits through go-metrics lands in a registry under
// Consul's names with the trellis prefix, the labelled replication series
// are kept and their per-peer-name duplicates dropped, and a second call
// returns the same collector (one global per process).
func TestLibraryMetricsReachTheRegistry(t *testing.T) {
	c, err := LibraryMetrics()
	if err != nil {
		t.Fatal(err)
	}
	again, err := LibraryMetrics()
	if err != nil || again != c {
		t.Fatalf("second LibraryMetrics = %v, %v; want the same collector", again, err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	// The same collector in a second registry (a second server in the
	// process) is allowed.
	if err := prometheus.NewRegistry().Register(c); err != nil {
		t.Fatalf("registering with a second registry: %v", err)
	}

	gometrics.MeasureSince([]string{"raft", "commitTime"}, time.Now().Add(-3*time.Millisecond))
	gometrics.IncrCounter([]string{"raft", "apply"}, 1)
	peer := []gometrics.Label{{Name: "peer_id", Value: "node-1"}}
	gometrics.MeasureSinceWithLabels([]string{"raft", "replication", "heartbeat"}, time.Now(), peer)
	gometrics.MeasureSince([]string{"raft", "replication", "heartbeat", "node-1"}, time.Now())

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
		if mf.GetName() == "trellis_raft_replication_heartbeat" {
			lp := mf.GetMetric()[0].GetLabel()
			if len(lp) != 1 || lp[0].GetName() != "peer_id" || lp[0].GetValue() != "node-1" {
				t.Errorf("heartbeat labels = %v, want peer_id=node-1", lp)
			}
		}
	}
	for _, want := range []string{"trellis_raft_commitTime", "trellis_raft_apply", "trellis_raft_replication_heartbeat"} {
		if !got[want] {
			t.Errorf("%s missing from the registry; have %v", want, got)
		}
	}
	if got["trellis_raft_replication_heartbeat_node_1"] {
		t.Error("the per-peer-name duplicate trellis_raft_replication_heartbeat_node_1 was exposed")
	}
}

func TestBlockedLibraryKeys(t *testing.T) {
	for _, k := range blockedLibraryKeys() {
		if k[len(k)-1] != '.' {
			t.Errorf("%q: a blocked prefix must end with a dot, or it would block the labelled series too", k)
		}
		if k[:len("trellis.raft.replication.")] != "trellis.raft.replication." {
			t.Errorf("%q: not a replication key under the prefix", k)
		}
	}
}
