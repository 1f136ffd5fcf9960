package fanout

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

func item(name, uid, version string) *pbresource.Resource {
	return &pbresource.Resource{Id: &pbresource.ID{Type: itemType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: name, Uid: uid}, Version: version}
}

func holds(name, uid, version string) Held {
	return Held{ID: item(name, uid, "").GetId(), Version: version}
}

// describe writes events as "op name/uid@version", in order.
func describe(events []*pbresource.WatchEvent) []string {
	var out []string
	for _, ev := range events {
		op := map[pbresource.WatchEvent_Op]string{pbresource.WatchEvent_OP_UPSERT: "upsert", pbresource.WatchEvent_OP_DELETE: "delete"}[ev.GetOp()]
		r := ev.GetResource()
		out = append(out, fmt.Sprintf("%s %s/%s@%s", op, r.GetId().GetName(), r.GetId().GetUid(), r.GetVersion()))
	}
	return out
}

// The difference sends what changed, what is missing, what is gone
// (matched by uid, so a name deleted and created again is a delete and an
// upsert), and nothing the subscriber holds at the snapshot's version.
func TestDifference(t *testing.T) {
	snap := []*pbresource.Resource{
		item("same", "u1", "5"),
		item("changed", "u2", "9"),
		item("new", "u3", "7"),
		item("recreated", "u5", "8"),
	}
	for _, tc := range []struct {
		name string
		held []Held
		want []string
	}{
		{"nothing held: every resource", nil, []string{
			"upsert changed/u2@9", "upsert new/u3@7", "upsert recreated/u5@8", "upsert same/u1@5"}},
		{"all held at their version: nothing", []Held{
			holds("same", "u1", "5"), holds("changed", "u2", "9"), holds("new", "u3", "7"), holds("recreated", "u5", "8")}, nil},
		{"changed, missing, gone and recreated", []Held{
			holds("same", "u1", "5"),
			holds("changed", "u2", "4"),
			holds("gone", "u4", "3"),
			holds("recreated", "u0", "2"),
		}, []string{
			"delete gone/u4@3", "delete recreated/u0@2",
			"upsert changed/u2@9", "upsert new/u3@7", "upsert recreated/u5@8"}},
		{"a version the snapshot does not have, newer or not, takes the snapshot's", []Held{
			holds("same", "u1", "6"), holds("changed", "u2", "9"), holds("new", "u3", "7"), holds("recreated", "u5", "8")},
			[]string{"upsert same/u1@5"}},
		{"a uid held twice is deleted once", []Held{
			holds("same", "u1", "5"), holds("changed", "u2", "9"), holds("new", "u3", "7"), holds("recreated", "u5", "8"),
			holds("gone", "u4", "3"), holds("gone", "u4", "3")},
			[]string{"delete gone/u4@3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := Difference(snap, tc.held, 42)
			if got := describe(events); !slices.Equal(got, tc.want) {
				t.Fatalf("difference:\n got %q\nwant %q", got, tc.want)
			}
			for _, ev := range events {
				if ev.GetIndex() != 42 {
					t.Errorf("%s at index %d, want the snapshot's, 42", describe([]*pbresource.WatchEvent{ev}), ev.GetIndex())
				}
				if !sameType(ev.GetResource().GetId().GetType(), itemType) {
					t.Errorf("%s has type %v, want the held id's", describe([]*pbresource.WatchEvent{ev}), ev.GetResource().GetId().GetType())
				}
			}
		})
	}
}

func sameType(a, b *pbresource.Type) bool {
	return a.GetGroup() == b.GetGroup() && a.GetGroupVersion() == b.GetGroupVersion() && a.GetKind() == b.GetKind()
}

// Whatever a subscriber holds, applying the difference to it (keeping
// what the difference does not touch) gives the snapshot, and nothing it
// holds at the snapshot's version is sent.
func TestDifferenceBringsTheSnapshot(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		uids := rapid.SampledFrom([]string{"a", "b", "c", "d", "e", "f"})
		names := rapid.SampledFrom([]string{"x", "y", "z"})
		versions := rapid.SampledFrom([]string{"1", "2", "3"})
		// A uid has one name for good; a name may be taken by several uids
		// (deleted and created again).
		nameOf := map[string]string{}
		name := func(uid string) string {
			if _, ok := nameOf[uid]; !ok {
				nameOf[uid] = names.Draw(t, "name of "+uid)
			}
			return nameOf[uid]
		}
		snap := map[string]*pbresource.Resource{} // by uid
		for _, uid := range rapid.SliceOfDistinct(uids, func(s string) string { return s }).Draw(t, "snap") {
			snap[uid] = item(name(uid), uid, versions.Draw(t, "version"))
		}
		heldNow := map[string]*pbresource.Resource{}
		var held []Held
		for _, uid := range rapid.SliceOfDistinct(uids, func(s string) string { return s }).Draw(t, "held") {
			r := item(name(uid), uid, versions.Draw(t, "version"))
			heldNow[uid] = r
			held = append(held, Held{ID: r.GetId(), Version: r.GetVersion()})
		}
		var list []*pbresource.Resource
		for _, r := range snap {
			list = append(list, r)
		}
		for _, ev := range Difference(list, held, 1) {
			uid := ev.GetResource().GetId().GetUid()
			switch ev.GetOp() {
			case pbresource.WatchEvent_OP_UPSERT:
				if h, ok := heldNow[uid]; ok && h.GetVersion() == ev.GetResource().GetVersion() {
					t.Fatalf("sent %s, held at that version", uid)
				}
				heldNow[uid] = ev.GetResource()
			case pbresource.WatchEvent_OP_DELETE:
				if _, ok := heldNow[uid]; !ok {
					t.Fatalf("deleted %s, not held", uid)
				}
				delete(heldNow, uid)
			}
		}
		if len(heldNow) != len(snap) {
			t.Fatalf("holds %d resources after the difference, the snapshot has %d", len(heldNow), len(snap))
		}
		for uid, r := range snap {
			if h := heldNow[uid]; h.GetVersion() != r.GetVersion() || h.GetId().GetName() != r.GetId().GetName() {
				t.Fatalf("holds %v of %s after the difference, the snapshot has %v", h, uid, r)
			}
		}
	})
}
