package inmem

import (
	"slices"
	"testing"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

func seq(from, to uint64) []uint64 {
	var out []uint64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func TestEventRingSince(t *testing.T) {
	for _, tc := range []struct {
		name  string
		size  int
		added []uint64 // indexes of the events added, in order
		since uint64
		want  []uint64 // indexes returned
		ok    bool
	}{
		{"empty ring", 4, nil, 1, nil, true},
		{"all kept", 4, seq(1, 3), 1, seq(2, 3), true},
		{"resume after the newest", 4, seq(1, 3), 3, nil, true},
		{"full, nothing evicted", 3, seq(1, 3), 1, seq(2, 3), true},
		{"full, resume before the oldest", 3, seq(1, 3), 0, seq(1, 3), true},
		{"one evicted, resume at it", 3, seq(1, 4), 1, seq(2, 4), true},
		{"one evicted, resume before it", 3, seq(1, 4), 0, nil, false},
		{"wrapped many times", 3, seq(1, 10), 7, seq(8, 10), true},
		{"wrapped many times, too old", 3, seq(1, 10), 6, nil, false},
		{"wrapped many times, resume at the newest", 3, seq(1, 10), 10, nil, true},
		{"gaps between indexes", 3, []uint64{2, 5, 9, 14}, 5, []uint64{9, 14}, true},
		{"resume inside the gap after the evicted", 3, []uint64{2, 5, 9, 14}, 3, []uint64{5, 9, 14}, true},
		{"resume before the evicted", 3, []uint64{2, 5, 9, 14}, 1, nil, false},
		{"batch kept whole", 3, []uint64{1, 2, 2, 2}, 1, []uint64{2, 2, 2}, true},
		{"batch partly evicted, resume before it", 3, []uint64{1, 2, 2, 2, 3}, 1, nil, false},
		{"batch partly evicted, resume at it", 3, []uint64{1, 2, 2, 2, 3}, 2, []uint64{3}, true},
		{"batch larger than the ring", 2, []uint64{1, 2, 2, 2}, 1, nil, false},
		{"batch larger than the ring, resume at it", 2, []uint64{1, 2, 2, 2}, 2, nil, true},
		{"size below one keeps one", 0, seq(1, 2), 1, []uint64{2}, true},
		{"size below one, too old", 0, seq(1, 2), 0, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newEventRing(tc.size)
			for _, idx := range tc.added {
				r.add(&pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_UPSERT, Index: idx})
			}
			got, ok := r.since(tc.since)
			if ok != tc.ok || !slices.Equal(indexes(got), tc.want) {
				t.Fatalf("since(%d) = %v, %v; want %v, %v", tc.since, indexes(got), ok, tc.want, tc.ok)
			}
		})
	}
}

func TestEventRingReset(t *testing.T) {
	r := newEventRing(4)
	for _, idx := range seq(1, 3) {
		r.add(&pbresource.WatchEvent{Index: idx})
	}
	r.reset(10)
	if got, ok := r.since(9); ok {
		t.Fatalf("after reset(10), since(9) = %v, true; want too old", indexes(got))
	}
	if got, ok := r.since(10); !ok || len(got) != 0 {
		t.Fatalf("after reset(10), since(10) = %v, %v; want nothing, true", indexes(got), ok)
	}
	for _, idx := range seq(11, 15) {
		r.add(&pbresource.WatchEvent{Index: idx})
	}
	if got, ok := r.since(11); !ok || !slices.Equal(indexes(got), seq(12, 15)) {
		t.Fatalf("since(11) = %v, %v; want 12..15, true", indexes(got), ok)
	}
	if _, ok := r.since(10); ok {
		t.Fatal("since(10) after 11 was evicted: want too old")
	}
}

func indexes(evs []*pbresource.WatchEvent) []uint64 {
	var out []uint64
	for _, ev := range evs {
		out = append(out, ev.GetIndex())
	}
	return out
}
