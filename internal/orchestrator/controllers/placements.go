package controllers

import (
	"sort"
	"sync"

	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

// placements indexes live tasks by the instance they are placed on. It is
// written by the task watch's mapper and read by the reconcilers, so it
// locks.
type placements struct {
	mu         sync.Mutex
	byInstance map[string]map[string]*pbresource.ID
	instanceOf map[string]string
	uidOf      map[string]string
}

func newPlacements() *placements {
	return &placements{byInstance: map[string]map[string]*pbresource.ID{}, instanceOf: map[string]string{}, uidOf: map[string]string{}}
}

// set records the task key (id) as placed on instance. It reports
// whether that is news: a task not indexed before, another incarnation of
// it (uid), or a move to another instance. A live task that changes in
// place (a report) is not.
func (p *placements) set(key string, id *pbresource.ID, instance string) (changed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old, ok := p.instanceOf[key]
	changed = !ok || old != instance || p.uidOf[key] != id.GetUid()
	if ok && old != instance {
		p.removeLocked(key)
	}
	tasks := p.byInstance[instance]
	if tasks == nil {
		tasks = map[string]*pbresource.ID{}
		p.byInstance[instance] = tasks
	}
	if _, ok := tasks[key]; !ok {
		// By name, without the uid: the reconciler reads whatever
		// incarnation is stored now.
		c := proto.Clone(id).(*pbresource.ID)
		c.Uid = ""
		tasks[key] = c
	}
	p.instanceOf[key] = instance
	p.uidOf[key] = id.GetUid()
	return changed
}

// remove forgets the task key.
func (p *placements) remove(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.removeLocked(key)
}

func (p *placements) removeLocked(key string) {
	instance, ok := p.instanceOf[key]
	if !ok {
		return
	}
	delete(p.instanceOf, key)
	delete(p.uidOf, key)
	tasks := p.byInstance[instance]
	delete(tasks, key)
	if len(tasks) == 0 {
		delete(p.byInstance, instance)
	}
}

// on returns the ids of the tasks placed on instance, ordered by key.
func (p *placements) on(instance string) []*pbresource.ID {
	p.mu.Lock()
	defer p.mu.Unlock()
	tasks := p.byInstance[instance]
	keys := make([]string, 0, len(tasks))
	for k := range tasks {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]*pbresource.ID, len(keys))
	for i, k := range keys {
		out[i] = tasks[k]
	}
	return out
}
