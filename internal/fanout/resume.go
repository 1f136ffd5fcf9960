package fanout

import (
	"cmp"
	"slices"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

// Held is a resource a subscriber already has: its id (tenancy, name and
// uid; the type is the caller's to set) and the version it has.
type Held struct {
	ID      *pbresource.ID
	Version string
}

// Difference is what takes a subscriber that holds held to snap (a key's
// snapshot, as Subscribe returned it, at index): the DELETE of every held
// resource snap lacks, then the UPSERT of every resource of snap not held
// at its version, each at index, in name order. A resource is matched by
// uid: one deleted and created again under the same name is another
// resource, its old self deleted and its new one upserted. What it holds
// at the version snap has is not sent; the subscriber keeps it.
//
// A subscriber that holds what the events of a stream showed it, and
// applies these (keeping what they do not touch), holds snap: that is
// the whole contract, and what lets a stream resume without the per-key
// history a replay from an index would need. Versions are compared for
// equality only, so a subscriber that holds a version snap does not (an
// older one, or one of its own writes the view has not reached) gets the
// view's.
func Difference(snap []*pbresource.Resource, held []Held, index uint64) []*pbresource.WatchEvent {
	have := make(map[string]string, len(held)) // uid → version
	for _, h := range held {
		have[h.ID.GetUid()] = h.Version
	}
	now := make(map[string]bool, len(snap))
	var upserts []*pbresource.Resource
	for _, res := range snap {
		uid := res.GetId().GetUid()
		now[uid] = true
		if v, ok := have[uid]; !ok || v != res.GetVersion() {
			upserts = append(upserts, res)
		}
	}
	var deletes []*pbresource.Resource
	for _, h := range held {
		if now[h.ID.GetUid()] {
			continue
		}
		now[h.ID.GetUid()] = true // a uid held twice is deleted once
		deletes = append(deletes, &pbresource.Resource{Id: h.ID, Version: h.Version})
	}
	byName := func(a, b *pbresource.Resource) int {
		return cmp.Or(
			cmp.Compare(a.GetId().GetTenancy().GetNamespace(), b.GetId().GetTenancy().GetNamespace()),
			cmp.Compare(a.GetId().GetName(), b.GetId().GetName()),
			cmp.Compare(a.GetId().GetUid(), b.GetId().GetUid()))
	}
	slices.SortFunc(deletes, byName)
	slices.SortFunc(upserts, byName)
	events := make([]*pbresource.WatchEvent, 0, len(deletes)+len(upserts))
	for _, res := range deletes {
		events = append(events, &pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_DELETE, Resource: res, Index: index})
	}
	for _, res := range upserts {
		events = append(events, &pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_UPSERT, Resource: res, Index: index})
	}
	return events
}
