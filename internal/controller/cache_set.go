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
// the sorted objects until any member changes; a read after an in-place
// change costs one pass over the names, not a sort.
type objectSet struct {
	members map[slot]*Object
	// order is the members' slots by namespace and name; nil when a
	// member came or went since.
	order []slot
	// sorted is the members in order, shared with every reader (its
	// length is its capacity, so a reader's append copies it); nil when a
	// member changed since.
	sorted []*Object
}

func newObjectSet() *objectSet { return &objectSet{members: make(map[slot]*Object)} }

// put files o under k, replacing what was there.
func (s *objectSet) put(k slot, o *Object) {
	if _, ok := s.members[k]; !ok {
		s.order = nil
	}
	s.members[k] = o
	s.sorted = nil
}

// remove takes k out.
func (s *objectSet) remove(k slot) {
	if _, ok := s.members[k]; !ok {
		return
	}
	delete(s.members, k)
	s.order = nil
	s.sorted = nil
}

// current returns the sorted members when they are built (ok false when
// build must run first). Needs the read lock.
func (s *objectSet) current() ([]*Object, bool) {
	if len(s.members) == 0 {
		return nil, true
	}
	return s.sorted, s.sorted != nil
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
		slices.SortFunc(s.order, func(a, b slot) int {
			return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
		})
	}
	s.sorted = make([]*Object, len(s.order))
	for i, k := range s.order {
		s.sorted[i] = s.members[k]
	}
	return s.sorted
}
