package test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"trellis.dev/trellis/internal/testcluster"
	"trellis.dev/trellis/internal/testcluster/lincheck"
)

// TestLeaderKilledUnderWrites starts three servers, writes and reads from
// several clients through every server, kills the leader with SIGKILL in
// the middle, and checks that the whole history is linearizable: every
// acknowledged write survived and no read saw a value out of order.
func TestLeaderKilledUnderWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	t.Parallel() // a cluster test without a short TTL: see the package doc
	ctx := context.Background()
	dir := t.TempDir()
	bin := trellisBinary(t)
	c, err := testcluster.Start(ctx, testcluster.Options{Bin: bin, Dir: dir, Servers: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			for _, m := range c.Members {
				b, _ := os.ReadFile(m.LogPath)
				t.Logf("--- %s log ---\n%s", m.Name, tail(b, 4000))
			}
		}
	})
	leader, err := c.WaitLeader(ctx, c.Members)
	if err != nil {
		t.Fatal(err)
	}

	keys := []string{"k0", "k1", "k2", "k3"}
	h := lincheck.NewHistory()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	acked := make([]int, 6)
	for client := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			target := client % len(c.Members)
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				m := c.Members[target]
				if !m.Running() {
					target = (target + 1) % len(c.Members)
					continue
				}
				key := keys[(client+seq)%len(keys)]
				if seq%3 == 2 {
					_, _ = h.Get(client, m.HTTPAddr, key, true) // a failed read has no effect
					continue
				}
				err := h.Put(client, m.HTTPAddr, key, fmt.Sprintf("c%d-%d", client, seq))
				switch {
				case err == nil:
					acked[client]++
				case errors.Is(err, lincheck.ErrUnknown), errors.Is(err, lincheck.ErrNotApplied):
				default:
					t.Errorf("client %d: %v", client, err)
					return
				}
			}
		}()
	}

	waitAcked := func(n int) {
		t.Helper()
		err := testcluster.WaitFor(ctx, 60*time.Second, func() bool { return h.Len() >= n })
		if err != nil {
			t.Fatalf("fewer than %d operations completed", n)
		}
	}
	waitAcked(300)
	t.Logf("killing leader %s", leader.Name)
	leader.Kill()
	var rest []*testcluster.Member
	for _, m := range c.Members {
		if m != leader {
			rest = append(rest, m)
		}
	}
	if _, err := c.WaitLeader(ctx, rest); err != nil {
		t.Fatal(err)
	}
	waitAcked(h.Len() + 300)
	close(stop)
	wg.Wait()

	// Final strong reads on each surviving server join the history.
	for _, m := range rest {
		for _, k := range keys {
			if _, err := h.Get(6, m.HTTPAddr, k, true); err != nil {
				t.Fatalf("final read on %s: %v", m.Name, err)
			}
		}
	}

	res, vis := h.Check(2 * time.Minute)
	t.Logf("%d operations, acknowledged writes per client %v, check: %s", h.Len(), acked, res)
	if res == porcupine.Illegal {
		t.Fatalf("history is not linearizable (visualization: %s)", vis)
	}

	// The killed server comes back with its data and catches up.
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, k := range keys {
		v, err := lincheck.GetDescription(rest[0].HTTPAddr, k, true)
		if err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	err = testcluster.WaitFor(ctx, 60*time.Second, func() bool {
		for _, k := range keys {
			if v, err := lincheck.GetDescription(leader.HTTPAddr, k, false); err != nil || v != want[k] {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("restarted server did not catch up to %v", want)
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
