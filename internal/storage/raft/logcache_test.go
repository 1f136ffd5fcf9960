package raft

import (
	"errors"
	"testing"

	hraft "github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
)

func entry(idx uint64, size int) *hraft.Log {
	return &hraft.Log{Index: idx, Term: 1, Type: hraft.LogCommand, Data: make([]byte, size)}
}

// cached reports whether c serves idx from memory: the store below has
// dropped every entry, so only the cache can answer.
func cached(t *testing.T, c *logCache, idx uint64) bool {
	t.Helper()
	var l hraft.Log
	err := c.GetLog(idx, &l)
	switch {
	case err == nil:
		if l.Index != idx {
			t.Fatalf("GetLog(%d) gave entry %d", idx, l.Index)
		}
		return true
	case errors.Is(err, hraft.ErrLogNotFound):
		return false
	}
	t.Fatalf("GetLog(%d): %v", idx, err)
	return false
}

func TestLogCacheKeepsTheNewestWithinItsBytes(t *testing.T) {
	store := hraft.NewInmemStore()
	unit := logBytes(entry(0, 1000))
	c := newLogCache(store, 16, 3*unit)
	for i := uint64(1); i <= 5; i++ {
		if err := c.StoreLog(entry(i, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	var l hraft.Log
	if err := store.GetLog(1, &l); err != nil {
		t.Fatalf("the entries were not written through: %v", err)
	}
	if err := store.DeleteRange(1, 5); err != nil { // behind the cache's back
		t.Fatal(err)
	}
	for i, want := range map[uint64]bool{1: false, 2: false, 3: true, 4: true, 5: true} {
		if got := cached(t, c, i); got != want {
			t.Errorf("entry %d cached = %v, want %v", i, got, want)
		}
	}
	if c.bytes != 3*unit {
		t.Fatalf("bytes = %d, want %d", c.bytes, 3*unit)
	}

	// An entry over the whole budget is written but not kept, and what
	// is kept stays within the budget.
	if err := c.StoreLogs([]*hraft.Log{entry(6, 4*unit)}); err != nil {
		t.Fatal(err)
	}
	if c.bytes > 3*unit {
		t.Fatalf("bytes = %d over the budget of %d", c.bytes, 3*unit)
	}
	if err := store.GetLog(6, &l); err != nil {
		t.Fatalf("the large entry was not written through: %v", err)
	}
}

func TestLogCacheCountsEntries(t *testing.T) {
	store := hraft.NewInmemStore()
	c := newLogCache(store, 4, 1<<30)
	var logs []*hraft.Log
	for i := uint64(1); i <= 6; i++ {
		logs = append(logs, entry(i, 10))
	}
	if err := c.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := store.DeleteRange(1, 6); err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 6; i++ {
		if got, want := cached(t, c, i), i > 2; got != want {
			t.Errorf("entry %d cached = %v, want %v", i, got, want)
		}
	}
	if c.bytes != 4*logBytes(entry(0, 10)) {
		t.Fatalf("bytes = %d after slots were reused", c.bytes)
	}
}

func TestLogCacheDeleteRangeEmptiesIt(t *testing.T) {
	store := hraft.NewInmemStore()
	c := newLogCache(store, 16, 1<<20)
	if err := c.StoreLogs([]*hraft.Log{entry(1, 10), entry(2, 10)}); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteRange(2, 2); err != nil {
		t.Fatal(err)
	}
	if cached(t, c, 2) {
		t.Fatal("a deleted entry is still served")
	}
	if !cached(t, c, 1) { // from the store now
		t.Fatal("an entry outside the range is gone")
	}
	if c.bytes != 0 {
		t.Fatalf("bytes = %d after DeleteRange", c.bytes)
	}
	if last, err := c.LastIndex(); err != nil || last != 1 {
		t.Fatalf("LastIndex = %d, %v; want 1", last, err)
	}
}

func TestLogCacheIsMonotonicAsItsStore(t *testing.T) {
	if newLogCache(hraft.NewInmemStore(), 16, 1<<20).IsMonotonic() {
		t.Fatal("raft's in-memory store is not monotonic")
	}
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(t.TempDir(), wal.WithMetaStore(meta))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(); meta.Close() })
	if !newLogCache(w, 16, 1<<20).IsMonotonic() {
		t.Fatal("raft-wal is monotonic; the cache must say so")
	}
}
