package controller

import (
	"cmp"
	"slices"
)

// objectSet is the objects of a type filed under one index key (or all of
// them), with their order kept between reads. Readers ask for the same
// sets over and over (the instances on every run of a scheduler, an
// environment's tasks) while they change far less often, and mostly in
// place (a task's report replaces its object under the same keys):
// sorting thousands of objects on each read cost milliseconds. So the
// order of the members' names is kept until a member comes or goes, and
// the sorted objects until any member changes; a read after changes in
// place copies the last sorted objects and puts the changed ones in their
// places (found by a binary search of the order), instead of looking
// every member up again.
type objectSet struct {
	members map[slot]*Object
	// order is the members' slots by namespace and name; nil when a
	// member came or went since.
	order []slot
	// sorted is the members in order as last built, shared with every
	// reader (its length is its capacity, so a reader's append copies
	// it); nil when a member came or went since. It is current unless
	// patch names members replaced in place since.
	sorted []*Object
	patch  []slot
}

func newObjectSet() *objectSet { return &objectSet{members: make(map[slot]*Object)} }

// put files o under k, replacing what was there.
func (s *objectSet) put(k slot, o *Object) {
	if _, ok := s.members[k]; !ok {
		s.order, s.sorted, s.patch = nil, nil, nil
	} else if s.sorted != nil {
		if len(s.patch) >= len(s.members)/4 {
			// Patching would cost more than a pass over the order.
			s.sorted, s.patch = nil, nil
		} else {
			s.patch = append(s.patch, k)
		}
	}
	s.members[k] = o
}

// remove takes k out.
func (s *objectSet) remove(k slot) {
	if _, ok := s.members[k]; !ok {
		return
	}
	delete(s.members, k)
	s.order, s.sorted, s.patch = nil, nil, nil
}

// current returns the sorted members when they are built (ok false when
// build must run first). Needs the read lock.
func (s *objectSet) current() ([]*Object, bool) {
	if len(s.members) == 0 {
		return nil, true
	}
	return s.sorted, s.sorted != nil && len(s.patch) == 0
}

// build makes the sorted members. Needs the write lock.
func (s *objectSet) build() []*Object {
	if out, ok := s.current(); ok {
		return out
	}
	if s.order == nil {
		s.order = make([]slot, 0, len(s.members))
		for k := range s.members {
			s.order = append(s.order, k)
		}
		slices.SortFunc(s.order, compareSlots)
	}
	if s.sorted != nil {
		// Only replaced in place since: the last build, with the changed
		// members put in their places. A new slice: readers hold the old.
		next := slices.Clone(s.sorted)
		for _, k := range s.patch {
			if i, found := slices.BinarySearchFunc(s.order, k, compareSlots); found {
				next[i] = s.members[k]
			}
		}
		s.sorted, s.patch = next, nil
		return s.sorted
	}
	s.sorted = make([]*Object, len(s.order))
	for i, k := range s.order {
		s.sorted[i] = s.members[k]
	}
	s.patch = nil
	return s.sorted
}

func compareSlots(a, b slot) int {
	return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
}
