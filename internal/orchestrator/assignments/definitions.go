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

// defKey names a task definition revision: namespace and family:revision.
type defKey struct{ namespace, ref string }

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
	family, rev, err := orchestrator.ParseTaskDefinitionRef(k.ref)
	if err != nil || rev <= 0 {
		return nil
	}
	resp, err := h.api.Read(ctx, &pbresource.ReadRequest{Id: orchestrator.TaskDefinitionID(k.namespace, family, rev)})
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
// definitions the stream has carried.
type definitionCarrier struct {
	hub  *Hub
	sent map[defKey]bool
}

func newDefinitionCarrier(h *Hub) *definitionCarrier {
	return &definitionCarrier{hub: h, sent: make(map[defKey]bool)}
}

// before is the event that must precede ev on the stream: the UPSERT of
// the definition of ev's task, the first time the stream carries a task of
// it; nil otherwise.
func (c *definitionCarrier) before(ctx context.Context, ev *pbresource.WatchEvent) *pbresource.WatchEvent {
	if ev.GetOp() != pbresource.WatchEvent_OP_UPSERT {
		return nil
	}
	task := taskOf(ev.GetResource())
	if task.GetTaskDefinition() == "" || orchestrator.TaskStatusOf(ev.GetResource()).GetLastStatus() == orchestrator.StatusStopped {
		return nil
	}
	k := defKey{ev.GetResource().GetId().GetTenancy().GetNamespace(), task.GetTaskDefinition()}
	if c.sent[k] {
		return nil
	}
	def := c.hub.definition(ctx, k)
	if def == nil {
		return nil
	}
	c.sent[k] = true
	return &pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_UPSERT, Resource: def, Index: ev.GetIndex()}
}
