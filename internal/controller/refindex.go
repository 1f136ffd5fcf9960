package controller

import (
	"sort"
	"sync"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

// refIndex is the reverse of a controller's References: for a referenced
// name, the managed resources that name it. It is fed by the managed type's
// watch only (never by a resync's list, which may be older than the watch).
type refIndex struct {
	refs func(*pbresource.Resource) []*pbresource.ID

	mu     sync.RWMutex
	byRef  map[key]map[key]*pbresource.ID // referenced → referencing → its id
	refsOf map[key][]key                  // referencing → what it references
}

func newRefIndex(refs func(*pbresource.Resource) []*pbresource.ID) *refIndex {
	return &refIndex{
		refs:   refs,
		byRef:  make(map[key]map[key]*pbresource.ID),
		refsOf: make(map[key][]key),
	}
}

// observe updates the index for a change of a managed resource.
func (x *refIndex) observe(ev Event) {
	from := nameKey(ev.Resource.GetId())
	var to []key
	if !ev.Deleted {
		for _, id := range x.refs(ev.Resource) {
			if id != nil {
				to = append(to, nameKey(id))
			}
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, k := range x.refsOf[from] {
		set := x.byRef[k]
		delete(set, from)
		if len(set) == 0 {
			delete(x.byRef, k)
		}
	}
	if len(to) == 0 {
		delete(x.refsOf, from)
		return
	}
	x.refsOf[from] = to
	id := nameOnly(ev.Resource.GetId())
	for _, k := range to {
		if x.byRef[k] == nil {
			x.byRef[k] = make(map[key]*pbresource.ID)
		}
		x.byRef[k][from] = id
	}
}

// referencing returns the ids naming id, ordered by namespace and name.
func (x *refIndex) referencing(id *pbresource.ID) []*pbresource.ID {
	x.mu.RLock()
	set := x.byRef[nameKey(id)]
	out := make([]*pbresource.ID, 0, len(set))
	for _, ref := range set {
		out = append(out, ref)
	}
	x.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if a, b := out[i].GetTenancy().GetNamespace(), out[j].GetTenancy().GetNamespace(); a != b {
			return a < b
		}
		return out[i].GetName() < out[j].GetName()
	})
	return out
}
