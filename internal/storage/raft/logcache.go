package raft

import (
	"sync"

	hraft "github.com/hashicorp/raft"
)

// logCache keeps the most recent log entries in memory in front of the
// write-ahead log, so that followers are sent, and apply, recent entries
// without a disk read. Raft's own LogCache counts entries only, and one
// entry is a whole batch of up to 8 MiB (MaxBatchSize): sixteen of those
// would be 128 MiB of a server's memory, doubled by the GC's headroom.
// This one holds at most maxEntries entries and maxBytes of them, and
// drops the oldest to stay within both.
type logCache struct {
	store hraft.LogStore

	mu sync.RWMutex
	// slots holds entry i at i % len(slots); a nil slot or one holding
	// another index is a miss.
	slots    []*hraft.Log
	bytes    int
	maxBytes int
}

// Defaults: sixteen entries (what followers a little behind need), and no
// more than 2 MiB of them. Entries are read back soon after they are
// stored (a follower applies what it has just appended; the leader sends
// its newest entries), so a few large batches suffice; an entry evicted
// sooner is read from the log's tail, which the page cache holds. Every
// cached byte is live heap that the GC's headroom doubles in RSS: at 8 MiB
// a batch load kept about 6 MB of entries (16 of ~380 KB).
const (
	logCacheEntries = 16
	logCacheBytes   = 2 << 20
)

func newLogCache(store hraft.LogStore, maxEntries, maxBytes int) *logCache {
	return &logCache{store: store, slots: make([]*hraft.Log, max(maxEntries, 1)), maxBytes: maxBytes}
}

var (
	_ hraft.LogStore          = (*logCache)(nil)
	_ hraft.MonotonicLogStore = (*logCache)(nil)
)

// logBytes is what an entry costs in memory, about.
func logBytes(l *hraft.Log) int {
	const fixed = 128 // the Log struct and its slice headers
	return fixed + len(l.Data) + len(l.Extensions)
}

// IsMonotonic passes on whether the store below only appends (raft-wal
// does, and raft must know it to restore a snapshot correctly).
func (c *logCache) IsMonotonic() bool {
	m, ok := c.store.(hraft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (c *logCache) GetLog(idx uint64, out *hraft.Log) error {
	c.mu.RLock()
	cached := c.slots[idx%uint64(len(c.slots))]
	c.mu.RUnlock()
	if cached != nil && cached.Index == idx {
		*out = *cached
		return nil
	}
	return c.store.GetLog(idx, out)
}

func (c *logCache) StoreLog(l *hraft.Log) error { return c.StoreLogs([]*hraft.Log{l}) }

// StoreLogs writes the entries through, then caches them (only once they
// are stored, so that the cache never holds what the log does not).
func (c *logCache) StoreLogs(logs []*hraft.Log) error {
	if err := c.store.StoreLogs(logs); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range logs {
		slot := &c.slots[l.Index%uint64(len(c.slots))]
		if *slot != nil {
			c.bytes -= logBytes(*slot)
		}
		*slot = l
		c.bytes += logBytes(l)
	}
	for c.bytes > c.maxBytes {
		c.evictOldest()
	}
	return nil
}

// evictOldest drops the cached entry with the lowest index. Called with
// c.mu held and at least one entry cached.
func (c *logCache) evictOldest() {
	oldest := -1
	for i, l := range c.slots {
		if l != nil && (oldest < 0 || l.Index < c.slots[oldest].Index) {
			oldest = i
		}
	}
	c.bytes -= logBytes(c.slots[oldest])
	c.slots[oldest] = nil
}

func (c *logCache) FirstIndex() (uint64, error) { return c.store.FirstIndex() }

func (c *logCache) LastIndex() (uint64, error) { return c.store.LastIndex() }

// DeleteRange empties the cache: the entries it holds may be among the
// deleted ones (a follower's conflicting tail).
func (c *logCache) DeleteRange(lo, hi uint64) error {
	c.mu.Lock()
	clear(c.slots)
	c.bytes = 0
	c.mu.Unlock()
	return c.store.DeleteRange(lo, hi)
}
