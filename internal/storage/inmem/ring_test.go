package inmem

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"

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
			r := newEventRing(tc.size, 1<<30)
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
	r := newEventRing(4, 1<<30)
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

func TestEventRingBytes(t *testing.T) {
	small := &pbresource.Resource{Id: testID("", "a"), Metadata: map[string]string{"k": "v"}}
	large := &pbresource.Resource{Id: testID("", "b"), Status: map[string]*pbresource.Status{
		"c": {Conditions: []*pbresource.Condition{{Type: "t", Message: string(make([]byte, 4096))}}},
	}}
	unit := resourceBytes(small)
	r := newEventRing(100, 3*unit)
	for _, idx := range seq(1, 5) {
		r.add(&pbresource.WatchEvent{Index: idx, Resource: small})
	}
	if got, ok := r.since(2); !ok || !slices.Equal(indexes(got), seq(3, 5)) {
		t.Fatalf("since(2) = %v, %v; want 3..5 (three fit), true", indexes(got), ok)
	}
	if _, ok := r.since(1); ok {
		t.Fatal("since(1) after 2 was evicted for room: want too old")
	}
	if r.bytes != 3*unit {
		t.Fatalf("bytes = %d, want %d", r.bytes, 3*unit)
	}

	// An event over the whole budget is kept alone.
	r.add(&pbresource.WatchEvent{Index: 6, Resource: large})
	if got, ok := r.since(5); !ok || !slices.Equal(indexes(got), []uint64{6}) {
		t.Fatalf("since(5) = %v, %v; want [6], true", indexes(got), ok)
	}
	if r.bytes != resourceBytes(large) {
		t.Fatalf("bytes = %d, want the large event's %d", r.bytes, resourceBytes(large))
	}
	r.add(&pbresource.WatchEvent{Index: 7, Resource: small})
	if got, ok := r.since(6); !ok || !slices.Equal(indexes(got), []uint64{7}) || r.bytes != unit {
		t.Fatalf("since(6) = %v, %v with %d bytes; want [7], true with %d", indexes(got), ok, r.bytes, unit)
	}
	r.reset(7)
	if r.bytes != 0 {
		t.Fatalf("bytes after reset = %d", r.bytes)
	}
}

func TestResourceBytesCountsVariableFields(t *testing.T) {
	base := resourceBytes(&pbresource.Resource{Id: testID("", "a")})
	withData := resourceBytes(&pbresource.Resource{Id: testID("", "a"), Data: &anypb.Any{Value: make([]byte, 1000)}})
	if withData-base != 1000 {
		t.Fatalf("1,000 bytes of data add %d", withData-base)
	}
	if resourceBytes(nil) != 0 {
		t.Fatal("a nil resource has a size")
	}
}
