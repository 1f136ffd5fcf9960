package raft

import (
	"testing"
	"time"

	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
	"trellis.dev/trellis/internal/storage/storagetest"
)

// conformanceTuning forms a fresh in-memory cluster for each subtest in a
// few hundred milliseconds (the default test tuning takes twice as long).
func conformanceTuning() Tuning {
	t := testTuning()
	t.HeartbeatTimeout = 150 * time.Millisecond
	t.ElectionTimeout = 150 * time.Millisecond
	t.LeaderLeaseTimeout = 150 * time.Millisecond
	return t
}

// The storage conformance suite, on the leader and on a follower of a
// 3-server cluster: a follower forwards writes and strong reads.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-server cluster per subtest")
	}
	for _, role := range []string{"leader", "follower"} {
		t.Run(role, func(t *testing.T) {
			pick := func(t *testing.T, opts []inmem.Option) storage.Backend {
				nodes := startClusterWith(t, 3, conformanceTuning(), opts)
				l := leaderOf(t, nodes)
				if role == "leader" {
					return l.b
				}
				return followersOf(nodes, l)[0].b
			}
			storagetest.Test(t, storagetest.Options{
				NewBackend: func(t *testing.T) storage.Backend { return pick(t, nil) },
				NewBackendWithEventHistory: func(t *testing.T, n int) storage.Backend {
					return pick(t, []inmem.Option{inmem.WithEventHistory(n)})
				},
			})
		})
	}
}
