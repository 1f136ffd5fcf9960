package assignments

import (
	"context"
	"sync"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// The task definitions a task stream carries (WatchTasksRequest.
// with_definitions): without them, every agent that gets a task of a
// definition it has not seen reads that definition from its server
// before it can start the task. A fresh deployment to N instances was N
// such reads, each a round trip in front of a start; a stream message is
// far cheaper than a call.

// maxCachedDefinitions bounds the hub's cache of definitions. Past it the
// cache starts empty again: a cluster with more revisions in use at once
// only reads some of them again.
const maxCachedDefinitions = 1024

// defKey names a task definition revision: its namespace and its
// resource's name (orchestrator.TaskDefinitionName), which is how an agent
// names the definitions it holds (WatchTasksResume.definitions).
type defKey struct{ namespace, name string }

// carriedBy is the definition a stream carries ahead of ev: the one its
// task uses, when ev is an UPSERT of a task that is not stopped and names
// a revision. false otherwise (a stopped task is never started, so its
// definition is not needed).
func carriedBy(ev *pbresource.WatchEvent) (defKey, bool) {
	if ev.GetOp() != pbresource.WatchEvent_OP_UPSERT {
		return defKey{}, false
	}
	return definitionOf(ev.GetResource())
}

// definitionOf is the definition a task that is not stopped uses.
func definitionOf(res *pbresource.Resource) (defKey, bool) {
	task := taskOf(res)
	if task.GetTaskDefinition() == "" || orchestrator.TaskStatusOf(res).GetLastStatus() == orchestrator.StatusStopped {
		return defKey{}, false
	}
	family, rev, err := orchestrator.ParseTaskDefinitionRef(task.GetTaskDefinition())
	if err != nil || rev <= 0 {
		return defKey{}, false
	}
	return defKey{res.GetId().GetTenancy().GetNamespace(), orchestrator.TaskDefinitionName(family, rev)}, true
}

// definitionCache holds the definitions the hub has read. Definitions are
// immutable once registered, so a cached one is never stale.
type definitionCache struct {
	mu   sync.Mutex
	defs map[defKey]*pbresource.Resource
}

// definition returns the TaskDefinition resource of k, from the cache or
// read from the local store (an eventual read: a task is placed after its
// definition is registered, so a server that has the task has it). nil
// when it cannot be read; the agent then reads it itself.
func (h *Hub) definition(ctx context.Context, k defKey) *pbresource.Resource {
	c := &h.definitions
	c.mu.Lock()
	res, ok := c.defs[k]
	c.mu.Unlock()
	if ok {
		return res
	}
	id := &pbresource.ID{Type: orchestrator.TaskDefinitionType, Tenancy: &pbresource.Tenancy{Namespace: k.namespace}, Name: k.name}
	resp, err := h.api.Read(ctx, &pbresource.ReadRequest{Id: id})
	if err != nil {
		return nil
	}
	res = resp.GetResource()
	c.mu.Lock()
	if c.defs == nil || len(c.defs) >= maxCachedDefinitions {
		c.defs = make(map[defKey]*pbresource.Resource)
	}
	c.defs[k] = res
	c.mu.Unlock()
	return res
}

// definitionCarrier is one stream's side of with_definitions: which
// definitions the stream has carried, or the agent said it holds.
type definitionCarrier struct {
	hub  *Hub
	sent map[defKey]bool
}

// newDefinitionCarrier starts a stream's carrier; held are the
// definitions the agent holds (a resumed stream's), never carried.
func newDefinitionCarrier(h *Hub, held map[defKey]bool) *definitionCarrier {
	sent := make(map[defKey]bool, len(held))
	for k := range held {
		sent[k] = true
	}
	return &definitionCarrier{hub: h, sent: sent}
}

// before is the event that must precede ev on the stream: the UPSERT of
// the definition of ev's task, the first time the stream carries a task of
// it; nil otherwise.
func (c *definitionCarrier) before(ctx context.Context, ev *pbresource.WatchEvent) *pbresource.WatchEvent {
	k, ok := carriedBy(ev)
	if !ok || c.sent[k] {
		return nil
	}
	def := c.hub.definition(ctx, k)
	if def == nil {
		return nil
	}
	c.sent[k] = true
	return &pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_UPSERT, Resource: def, Index: ev.GetIndex()}
}
