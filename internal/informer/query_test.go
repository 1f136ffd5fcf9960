package informer_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"trellis.dev/trellis/internal/informer"
)

// TestParseQuery: the blocking query's and the consistency modes'
// parameters, each refusal naming its parameter.
func TestParseQuery(t *testing.T) {
	for _, c := range []struct {
		query   string
		want    informer.Query
		refused string // the parameter a refusal names
	}{
		{query: "", want: informer.Query{}},
		{query: "index=42&wait=30s", want: informer.Query{MinIndex: 42, Wait: 30 * time.Second}},
		{query: "index=42&wait=999h", want: informer.Query{MinIndex: 42, Wait: informer.MaxQueryWait}},
		{query: "consistent", want: informer.Query{Consistent: true}},
		{query: "stale", want: informer.Query{}},
		{query: "index=-1", refused: "index"},
		{query: "index=abc", refused: "index"},
		{query: "wait=soon", refused: "wait"},
		{query: "wait=-5s", refused: "wait"},
		{query: "consistent&stale", refused: "consistent and stale"},
	} {
		v, err := url.ParseQuery(c.query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := informer.ParseQuery(v)
		if c.refused != "" {
			if !errors.Is(err, informer.ErrBadQuery) || !strings.Contains(err.Error(), c.refused+":") {
				t.Errorf("?%s: %v; want a refusal naming %s", c.query, err, c.refused)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("?%s: %+v, %v; want %+v", c.query, got, err, c.want)
		}
	}
}

// TestAwaitBlocksUntilAChange: a blocking query answers at once when the
// type changed after its index, waits for a change otherwise, and, when
// the wait ends first, answers with the index it has, not an error.
func TestAwaitBlocksUntilAChange(t *testing.T) {
	h := newHarness(t, t, true)
	h.start()
	h.put("a", "g1")
	h.caughtUp()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := h.in.Await(ctx, itemType, informer.Query{})
	if err != nil || first < 1 {
		t.Fatalf("a read without a bound: index %d, %v", first, err)
	}
	if got, err := h.in.Await(ctx, itemType, informer.Query{MinIndex: first - 1}); err != nil || got != first {
		t.Fatalf("a blocking query from before the last change: %d, %v; want %d at once", got, err, first)
	}
	if got, err := h.in.Await(ctx, itemType, informer.Query{MinIndex: first, Wait: 20 * time.Millisecond}); err != nil || got != first {
		t.Fatalf("a blocking query whose wait ends: %d, %v; want %d and no error", got, err, first)
	}
	answered := make(chan uint64, 1)
	go func() {
		got, err := h.in.Await(ctx, itemType, informer.Query{MinIndex: first, Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		answered <- got
	}()
	h.put("b", "g2")
	if got := <-answered; got <= first {
		t.Fatalf("a blocking query answered with index %d after a change; want above %d", got, first)
	}
	if h.in.Get(itemID("b")) == nil {
		t.Fatal("the change that answered the blocking query is not in the cache")
	}
	if got, err := h.in.Await(ctx, itemType, informer.Query{Consistent: true}); err != nil || got <= first {
		t.Fatalf("a consistent read: %d, %v", got, err)
	}
}
