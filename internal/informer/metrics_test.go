package informer_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"trellis.dev/trellis/internal/informer"
)

// TestCollector: the informer reports what it holds, the deltas it handed
// on by op, its subscribers and its index.
func TestCollector(t *testing.T) {
	h := newHarness(t, t, true)
	if _, err := h.in.Subscribe(itemType, func(informer.Delta) {}); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.caughtUp() // listed: the changes below come one by one
	h.put("a", "g1")
	h.put("b", "g1")
	h.put("b", "g2")
	h.remove("a")
	h.caughtUp()
	want := `
# HELP trellis_informer_deltas_total Deltas the informer handed to its subscribers' type, by type and op (added, changed, removed): one per change of the cache, whatever the number of subscribers.
# TYPE trellis_informer_deltas_total counter
trellis_informer_deltas_total{op="added",type="test/v1/Item"} 2
trellis_informer_deltas_total{op="changed",type="test/v1/Item"} 1
trellis_informer_deltas_total{op="removed",type="test/v1/Item"} 1
# HELP trellis_informer_objects Resources held by the informer, by type.
# TYPE trellis_informer_objects gauge
trellis_informer_objects{type="test/v1/Item"} 1
# HELP trellis_informer_subscribers Subscribers of the informer, by type.
# TYPE trellis_informer_subscribers gauge
trellis_informer_subscribers{type="test/v1/Item"} 1
`
	if err := testutil.CollectAndCompare(h.in.Collector(), strings.NewReader(want), "trellis_informer_deltas_total", "trellis_informer_objects", "trellis_informer_subscribers"); err != nil {
		t.Error(err)
	}
	if got := testutil.CollectAndCount(h.in.Collector(), "trellis_informer_index"); got != 1 {
		t.Errorf("%d index series; want 1", got)
	}
}
