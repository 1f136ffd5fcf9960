package main

import (
	"context"
	"testing"
	"time"
)

func TestChangesLastWatcherCountsOnceEach(t *testing.T) {
	cs := &changes{watchers: 2}
	base := time.Unix(100, 0)
	lasts := make([]*change, 2)
	cs.seen(0, 1, base, &lasts[0]) // before any change: ignored
	c := cs.begin(1)
	cs.seen(0, 0, base.Add(1), &lasts[0]) // an old value: ignored
	cs.seen(0, 1, base.Add(2), &lasts[0])
	cs.seen(0, 1, base.Add(9), &lasts[0]) // a second read: ignored
	cs.seen(1, 1, base.Add(5), &lasts[1])
	last, err := c.wait(context.Background(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !last.Equal(base.Add(5)) {
		t.Errorf("last = %v, want %v", last, base.Add(5))
	}
	// The next change needs both again.
	c2 := cs.begin(0)
	cs.seen(0, 0, base.Add(10), &lasts[0])
	if c2.left.Load() != 1 {
		t.Errorf("left = %d after one of two watchers, want 1", c2.left.Load())
	}
}

func TestChangeWaitNamesTheMissing(t *testing.T) {
	cs := &changes{watchers: 3}
	c := cs.begin(1)
	var last *change
	cs.seen(0, 1, time.Now(), &last)
	_, err := c.wait(context.Background(), time.Millisecond)
	if err == nil || err.Error() != "2 of 3 watchers had not seen a change after 1ms" {
		t.Errorf("wait = %v", err)
	}
}

func TestRecordSplitsLeaderAndFollowers(t *testing.T) {
	cs := &changes{watchers: 6}
	base := time.Unix(100, 0)
	c := cs.begin(1)
	lasts := make([]*change, 6)
	// Watchers 0 and 3 watch server 0, 1 and 4 server 1, 2 and 5 server 2.
	for w, ms := range []int{10, 20, 30, 40, 25, 5} {
		cs.seen(w, 1, base.Add(time.Duration(ms)*time.Millisecond), &lasts[w])
	}
	last, err := c.wait(context.Background(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := &watchResult{servers: 3}
	r.record(c, base, base.Add(2*time.Millisecond), last, 1)
	if r.fromSend[0] != 40*time.Millisecond || r.fromAck[0] != 38*time.Millisecond || r.write[0] != 2*time.Millisecond {
		t.Errorf("fromSend, fromAck, write = %v, %v, %v", r.fromSend, r.fromAck, r.write)
	}
	if r.onLeader[0] != 25*time.Millisecond {
		t.Errorf("onLeader = %v, want 25ms (server 1's last watcher)", r.onLeader)
	}
	if r.onFollowers[0] != 40*time.Millisecond {
		t.Errorf("onFollowers = %v, want 40ms (server 0's last watcher)", r.onFollowers)
	}
}
