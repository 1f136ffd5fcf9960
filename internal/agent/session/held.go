package session

import (
	"cmp"
	"slices"
	"strconv"
	"sync"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// held is what the agent holds of its instance's tasks: each task as the
// servers last showed it (the task stream, a report's stored answer, a
// task read again), and the task definitions the stream carried. A
// reconnecting agent sends it (WatchTasksRequest.resume), and the server
// sends only what differs; the agent applies that to what it holds, and
// hands the task manager the result, whole, as it would a fresh listing.
//
// It is the session's own record, beside the task manager's: the manager
// forgets a task once it is done with it, while the store (and so the
// server's view) keeps it until it is deleted; what the agent holds must
// be what the store has, or the server would send every such task again.
type held struct {
	mu sync.Mutex
	// whole: a whole listing has been taken in since the agent started, so
	// tasks is what the store had as of the view index (and changes since).
	// Until then the agent holds nothing it can vouch for.
	whole bool
	tasks map[string]*pbresource.Resource // by uid
	defs  map[defName]bool
}

// defName names a task definition the stream carried: its namespace and
// resource name.
type defName struct{ namespace, name string }

func newHeld() *held {
	return &held{tasks: make(map[string]*pbresource.Resource), defs: make(map[defName]bool)}
}

// resume is what to send as WatchTasksRequest.resume: nil when the agent
// holds no whole view, or more tasks than a resume may hold (it then
// takes a whole snapshot).
func (h *held) resume() *pbagent.WatchTasksResume {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.whole || len(h.tasks) > orchestrator.MaxHeldEntries {
		return nil
	}
	r := &pbagent.WatchTasksResume{Tasks: make([]*pbagent.HeldResource, 0, len(h.tasks))}
	for _, res := range h.tasks {
		id := res.GetId()
		r.Tasks = append(r.Tasks, &pbagent.HeldResource{
			Id:      &pbresource.ID{Tenancy: &pbresource.Tenancy{Namespace: id.GetTenancy().GetNamespace()}, Name: id.GetName(), Uid: id.GetUid()},
			Version: res.GetVersion(),
		})
	}
	for d := range h.defs {
		if len(r.Definitions) == orchestrator.MaxHeldEntries {
			break // the rest are carried again
		}
		r.Definitions = append(r.Definitions, &pbresource.ID{Tenancy: &pbresource.Tenancy{Namespace: d.namespace}, Name: d.name})
	}
	return r
}

// isWhole: the agent holds a whole view (it has taken in a whole
// listing since it started), so it resumes from it.
func (h *held) isWhole() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.whole
}

// replace takes a whole listing: the agent holds exactly it.
func (h *held) replace(listing []*pbresource.Resource) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tasks = make(map[string]*pbresource.Resource, len(listing))
	for _, res := range listing {
		h.tasks[res.GetId().GetUid()] = res
	}
	h.whole = true
}

// resumed applies the start of a resumed stream (its events before
// END_OF_SNAPSHOT: upserts and deletes) to what the agent holds, and
// returns all it holds then: what a fresh listing would have shown.
func (h *held) resumed(start []*pbresource.WatchEvent) []*pbresource.Resource {
	h.mu.Lock()
	defer h.mu.Unlock()
	applyResumed(h.tasks, start)
	listing := make([]*pbresource.Resource, 0, len(h.tasks))
	for _, res := range h.tasks {
		listing = append(listing, res)
	}
	slices.SortFunc(listing, func(a, b *pbresource.Resource) int {
		return cmp.Compare(a.GetId().GetName(), b.GetId().GetName())
	})
	return listing
}

// applyResumed applies a resumed start to tasks (by uid): each upsert
// replaces what is held of its task, unless what is held is newer (one of
// the agent's own reports, stored while the stream started); each delete
// removes its task.
func applyResumed(tasks map[string]*pbresource.Resource, start []*pbresource.WatchEvent) {
	for _, ev := range start {
		switch ev.GetOp() {
		case pbresource.WatchEvent_OP_UPSERT:
			take(tasks, ev.GetResource())
		case pbresource.WatchEvent_OP_DELETE:
			delete(tasks, ev.GetResource().GetId().GetUid())
		}
	}
}

// observe takes one change the servers showed: a stream event after its
// start, a report's stored answer, a task read again.
func (h *held) observe(res *pbresource.Resource, deleted bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if deleted {
		delete(h.tasks, res.GetId().GetUid())
		return
	}
	take(h.tasks, res)
}

// stored takes a report's stored answer: the newer version of a task the
// agent holds (the stream does not echo the agent's own reports). A task
// it does not hold is left alone: held only ever has what a view showed.
func (h *held) stored(res *pbresource.Resource) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.tasks[res.GetId().GetUid()]; ok {
		take(h.tasks, res)
	}
}

// take records res unless a newer version of it is held.
func take(tasks map[string]*pbresource.Resource, res *pbresource.Resource) {
	uid := res.GetId().GetUid()
	if cur, ok := tasks[uid]; ok && newer(cur, res) {
		return
	}
	tasks[uid] = res
}

// newer: a is a later version of the task than b. Versions are the
// store's index at each write; one that does not parse is never newer.
func newer(a, b *pbresource.Resource) bool {
	v, err1 := strconv.ParseUint(a.GetVersion(), 10, 64)
	w, err2 := strconv.ParseUint(b.GetVersion(), 10, 64)
	return err1 == nil && err2 == nil && v > w
}

// learnDefinition records a definition the stream carried.
func (h *held) learnDefinition(res *pbresource.Resource) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.defs[defName{res.GetId().GetTenancy().GetNamespace(), res.GetId().GetName()}] = true
}

// forget drops everything: the servers lost their state (DataLoss), and
// their view, whole, is all there is. Definitions go too: a revision
// registered again after the loss may not be the one the agent holds.
func (h *held) forget() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.whole = false
	h.tasks = make(map[string]*pbresource.Resource)
	h.defs = make(map[defName]bool)
}
