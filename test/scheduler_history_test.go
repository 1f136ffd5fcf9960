package test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/testcluster"
)

// The fault test records every version of every Task and Instance the
// servers ever stored, through watches that resume on another server when
// theirs dies, and replays that history in index order: the store's
// sequence of states, one per Raft index, in which "one and only one" must
// hold at every step, not only at the end.

var (
	taskType     = wire.Type{Group: "orchestrator", GroupVersion: "v1", Kind: "Task"}
	instanceType = wire.Type{Group: "orchestrator", GroupVersion: "v1", Kind: "Instance"}
)

// histTask is what the checks read of a version of a task.
type histTask struct {
	Environment    string `json:"environment"`
	Instance       string `json:"instance"`
	TaskDefinition string `json:"task_definition"`
	Deployment     string `json:"deployment"`
	DesiredStatus  string `json:"desired_status"`
	LastStatus     string `json:"last_status"`
	StopReason     string `json:"stop_reason"`
	StartedAt      string `json:"started_at"`
}

// decodeTask decodes a task's data into v, then, over it, what its agent
// reported (its status["agent"], whose payload has the same field names:
// last_status, stop_reason, started_at, containers, ...); a task whose
// agent reported nothing is PENDING. The checks read the two as one.
func decodeTask(data json.RawMessage, status map[string]json.RawMessage, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return err
	}
	payload := func(key string) (json.RawMessage, error) {
		raw, ok := status[key]
		if !ok {
			return nil, nil
		}
		var entry struct {
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(raw, &entry); err != nil {
			return nil, fmt.Errorf("status %s: %w", key, err)
		}
		return entry.Data, nil
	}
	report, err := payload("agent")
	if err != nil {
		return err
	}
	if report == nil {
		report = json.RawMessage(`{"last_status":"PENDING"}`)
	}
	// The task controller's LOST verdict has a key of its own; it holds
	// over the agent's report it names (orchestrator.MergeTaskStatus).
	lost, err := payload("orchestrator-task")
	if err != nil {
		return err
	}
	if lost != nil {
		var verdict struct {
			Reason     string `json:"reason"`
			ReportedAt string `json:"reported_at"`
		}
		var agent struct {
			ReportedAt string `json:"reported_at"`
		}
		if err := json.Unmarshal(lost, &verdict); err != nil {
			return fmt.Errorf("status orchestrator-task: %w", err)
		}
		if err := json.Unmarshal(report, &agent); err != nil {
			return fmt.Errorf("status agent: %w", err)
		}
		if verdict.ReportedAt == agent.ReportedAt {
			if err := json.Unmarshal(report, v); err != nil {
				return err
			}
			return json.Unmarshal(fmt.Appendf(nil, `{"last_status":"LOST","stop_reason":%q}`, verdict.Reason), v)
		}
	}
	return json.Unmarshal(report, v)
}

// claims: the task is live and meant to go on running. A task asked to
// stop is live until its agent reports it STOPPED, but no longer claims
// its instance: its replacement may be placed beside it, and waits.
func (t histTask) claims() bool { return t.LastStatus != "STOPPED" && t.DesiredStatus == "RUNNING" }

// live: not STOPPED (LOST counts: its agent may return with it running).
func (t histTask) live() bool { return t.LastStatus != "STOPPED" }

// holds: the task runs on its instance, as far as the store knows (LOST
// counts: its agent may return with it running).
func (t histTask) holds() bool { return t.LastStatus == "RUNNING" || t.LastStatus == "LOST" }

// histInstance is what the checks read of a version of an instance.
type histInstance struct {
	Cluster    string            `json:"cluster"`
	Status     string            `json:"status"`
	Session    string            `json:"session"`
	Attributes map[string]string `json:"attributes"`
}

// histEvent is one change the store made: an upsert (a new version) or a
// delete, at a Raft index.
type histEvent struct {
	index   uint64
	kind    string // "Task" or "Instance"
	name    string
	version string
	deleted bool
	task    histTask
	inst    histInstance
}

// storeHistory collects the events of the watches. Events come again after a
// watch resumes (it resumes one index early, since a connection cut in
// the middle of a batch's events leaves that index half delivered); they
// are kept once.
type storeHistory struct {
	mu     sync.Mutex
	events []histEvent
	seen   map[string]bool   // kind/index/name
	latest map[string]string // kind/name -> the last version seen
	// gaps says why the history may miss changes (a watch could not
	// resume anywhere); it then proves nothing.
	gaps []string
	// resumes counts the watches started again after their server went.
	resumes int
	// on is the server each kind's watch streams from now; hops every
	// watch opened and ended, for diagnosis.
	on     map[string]string
	hops   []string
	wg     sync.WaitGroup
	cancel context.CancelFunc
}

func (h *storeHistory) add(kind string, ev *wire.Event) error {
	if ev.Resource == nil || (ev.Op != wire.OpUpsert && ev.Op != wire.OpDelete) {
		return nil
	}
	he := histEvent{index: ev.Index, kind: kind, name: ev.Resource.ID.Name, version: ev.Resource.Version, deleted: ev.Op == wire.OpDelete}
	var err error
	if kind == taskType.Kind {
		err = decodeTask(ev.Resource.Data, ev.Resource.Status, &he.task)
	} else {
		var data json.RawMessage
		if data, err = registeredData(ev.Resource.Data, ev.Resource.Status); err == nil {
			err = json.Unmarshal(data, &he.inst)
		}
	}
	if err != nil {
		return fmt.Errorf("%s %s at index %d: %w", kind, he.name, he.index, err)
	}
	key := fmt.Sprintf("%s/%d/%s", kind, he.index, he.name)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen[key] {
		return nil
	}
	h.seen[key] = true
	h.events = append(h.events, he)
	if he.deleted {
		delete(h.latest, kind+"/"+he.name)
	} else {
		h.latest[kind+"/"+he.name] = he.version
	}
	return nil
}

// has reports whether the history holds the version of a resource (or
// its deletion when version is "").
func (h *storeHistory) has(kind, name, version string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.latest[kind+"/"+name] == version
}

// latestOf is the last version of a resource the history holds.
func (h *storeHistory) latestOf(kind, name string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.latest[kind+"/"+name]
}

// where says which server each watch streams from.
func (h *storeHistory) where() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprint(h.on) + "; hops: " + strings.Join(h.hops, " | ")
}

func (h *storeHistory) gap(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gaps = append(h.gaps, fmt.Sprintf(format, args...))
}

// recordHistory starts a watch on every Task and one on every Instance,
// from now on, each on the first server members lists (then the next
// while that fails); stop them with stop.
func recordHistory(ctx context.Context, members func() []*testcluster.Member) *storeHistory {
	ctx, cancel := context.WithCancel(ctx)
	h := &storeHistory{seen: map[string]bool{}, latest: map[string]string{}, on: map[string]string{}, cancel: cancel}
	for _, w := range []struct {
		typ wire.Type
		ns  string
	}{{taskType, "*"}, {instanceType, ""}} {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			h.follow(ctx, w.typ, w.ns, members)
		}()
	}
	return h
}

func (h *storeHistory) stop() {
	h.cancel()
	h.wg.Wait()
}

// follow watches typ on one running server after another until ctx ends,
// resuming each time from the last index it got.
func (h *storeHistory) follow(ctx context.Context, typ wire.Type, ns string, members func() []*testcluster.Member) {
	var last uint64 // the highest index received
	gone := 0       // servers in a row that could not resume from last
	tries := 0      // failed tries since the last watch that streamed
	for ctx.Err() == nil {
		if tries > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		ms := members()
		if len(ms) == 0 {
			tries++
			continue
		}
		m := ms[tries%len(ms)]
		tries++
		c, err := client.New(m.HTTPAddr)
		if err != nil {
			h.gap("%s watch: %v", typ.Kind, err)
			return
		}
		since := uint64(0)
		if last > 0 {
			since = last - 1
		}
		w, err := c.Watch(ctx, typ, client.ListOptions{Namespace: ns, Index: since})
		if err != nil {
			h.mu.Lock()
			h.on[typ.Kind+" failed"] = fmt.Sprintf("%s from index %d: %v", m.Name, since, err)
			h.hops = append(h.hops, fmt.Sprintf("%s %s from %d failed: %v", typ.Kind, m.Name, since, err))
			h.mu.Unlock()
		}
		if client.IsCode(err, wire.CodeGone) {
			if gone++; gone >= 3*len(ms) {
				h.gap("%s watch: no server can resume after index %d: %v", typ.Kind, since, err)
				return
			}
			continue
		}
		if err != nil {
			continue
		}
		gone, tries = 0, 0
		h.mu.Lock()
		if last > 0 {
			h.resumes++
		}
		h.on[typ.Kind] = fmt.Sprintf("%s from index %d", m.Name, since)
		h.hops = append(h.hops, fmt.Sprintf("%s %s from %d", typ.Kind, m.Name, since))
		h.mu.Unlock()
		for {
			ev, err := w.Next()
			if err != nil {
				h.mu.Lock()
				h.on[typ.Kind+" ended"] = fmt.Sprintf("%s after index %d: %v", m.Name, last, err)
				h.hops = append(h.hops, fmt.Sprintf("%s %s ended after %d: %v", typ.Kind, m.Name, last, err))
				h.mu.Unlock()
				// The server went, cut the watch off, or ctx ended: watch
				// again from last (a "gone" error line means the next
				// server must try).
				break
			}
			last = max(last, ev.Index)
			if err := h.add(typ.Kind, ev); err != nil {
				h.gap("%v", err)
			}
		}
		w.Close()
	}
}

// violation is a state of the store that breaks "one and only one".
type violation struct {
	index       uint64
	environment string
	instance    string
	what        string   // "meant to run" or "running"
	tasks       []string // "name (desired/last)"
}

func (v violation) String() string {
	return fmt.Sprintf("index %d: environment %s has %d tasks %s on instance %s: %s",
		v.index, v.environment, len(v.tasks), v.what, v.instance, strings.Join(v.tasks, ", "))
}

// misplacement is a task created on an instance that did not match its
// environment's instance group in the store's state just before.
type misplacement struct {
	index          uint64
	task, instance string
	why            string
}

// replayReport is what a replay of the history found.
type replayReport struct {
	events, indexes, tasks int
	violations             []violation
	misplacements          []misplacement
	// undone lists the changes of a task's status that undo what its
	// agent did: a STOPPED task reported PENDING or RUNNING again, a task
	// that ran reported PENDING, a task started a second time, or a task
	// that was meant to go on running reported STOPPED on an instance
	// whose tasks could not have vanished. A server that hands an agent
	// an old list of its tasks causes them.
	undone []string
}

// undoes says what is wrong with a task's change from prev to next, ""
// when nothing is; ran says prev or an earlier version was RUNNING, and
// started is the first started_at any version had.
// mayVanish says the task's instance was killed with its tasks, which
// its agent then reports STOPPED while they were meant to run.
func undoes(prev, next histTask, ran bool, started string, mayVanish bool) string {
	switch {
	case prev.LastStatus == "STOPPED" && next.LastStatus != "STOPPED":
		return "a STOPPED task became " + next.LastStatus
	case ran && next.LastStatus == "PENDING":
		return "a task that ran became PENDING"
	case started != "" && next.StartedAt != "" && next.StartedAt != started:
		return fmt.Sprintf("started again at %s (first at %s)", next.StartedAt, started)
	case next.LastStatus == "STOPPED" && prev.LastStatus != "STOPPED" && prev.DesiredStatus == "RUNNING" &&
		next.DesiredStatus == "RUNNING" && !mayVanish:
		return "stopped while it was meant to run: " + next.StopReason
	}
	return ""
}

// replay applies the history in index order and checks, after every
// index, that no environment has two tasks on one instance that are live
// and meant to run, nor two that run (RUNNING or LOST). matches
// says whether an instance matched an environment's group; with it the
// replay also lists tasks created on instances that did not match in the
// state before their creation.
//
// It also follows each task through its versions and lists in undone the
// changes that undo what its agent did (see undoes); mayVanish names the
// instances that were killed with their tasks.
func (h *storeHistory) replay(matches func(env string, in histInstance, exists bool) (bool, string), mayVanish func(instance string) bool) replayReport {
	h.mu.Lock()
	events := slices.Clone(h.events)
	h.mu.Unlock()
	slices.SortStableFunc(events, func(a, b histEvent) int {
		switch {
		case a.index < b.index:
			return -1
		case a.index > b.index:
			return 1
		}
		return 0
	})
	type key struct{ env, instance string }
	tasks := map[string]histTask{}
	ran := map[string]bool{}       // tasks that were RUNNING once
	started := map[string]string{} // the first started_at of each task
	instances := map[string]histInstance{}
	byKey := map[key]map[string]bool{} // the tasks of each environment and instance
	rep := replayReport{events: len(events)}
	for i := 0; i < len(events); {
		idx := events[i].index
		j := i
		for j < len(events) && events[j].index == idx {
			j++
		}
		group := events[i:j]
		i = j
		rep.indexes++
		// Creations are checked against the instances as they were before
		// this index: the scheduler decided on an earlier state.
		for _, ev := range group {
			if ev.kind != taskType.Kind || ev.deleted || ev.task.Environment == "" {
				continue
			}
			if _, known := tasks[ev.name]; known {
				continue
			}
			rep.tasks++
			in, exists := instances[ev.task.Instance]
			if ok, why := matches(ev.task.Environment, in, exists); !ok {
				rep.misplacements = append(rep.misplacements, misplacement{index: idx, task: ev.name, instance: ev.task.Instance, why: why})
			}
		}
		touched := map[key]bool{}
		for _, ev := range group {
			if ev.kind == instanceType.Kind {
				if ev.deleted {
					delete(instances, ev.name)
				} else {
					instances[ev.name] = ev.inst
				}
				continue
			}
			if old, ok := tasks[ev.name]; ok && old.Environment != "" {
				k := key{old.Environment, old.Instance}
				delete(byKey[k], ev.name)
				touched[k] = true
			}
			if ev.deleted {
				delete(tasks, ev.name)
				continue
			}
			if old, ok := tasks[ev.name]; ok {
				if why := undoes(old, ev.task, ran[ev.name], started[ev.name], mayVanish(ev.task.Instance)); why != "" {
					rep.undone = append(rep.undone, fmt.Sprintf("index %d: task %s on %s (%s): %s", idx, ev.name, ev.task.Instance, ev.task.TaskDefinition, why))
				}
			}
			if ev.task.LastStatus == "RUNNING" {
				ran[ev.name] = true
			}
			if started[ev.name] == "" {
				started[ev.name] = ev.task.StartedAt
			}
			tasks[ev.name] = ev.task
			if ev.task.Environment != "" {
				k := key{ev.task.Environment, ev.task.Instance}
				if byKey[k] == nil {
					byKey[k] = map[string]bool{}
				}
				byKey[k][ev.name] = true
				touched[k] = true
			}
		}
		for k := range touched {
			for _, c := range []struct {
				what string
				is   func(histTask) bool
			}{{"meant to run", histTask.claims}, {"running", histTask.holds}} {
				v := violation{index: idx, environment: k.env, instance: k.instance, what: c.what}
				for name := range byKey[k] {
					if t := tasks[name]; c.is(t) {
						v.tasks = append(v.tasks, fmt.Sprintf("%s (%s, desired %s, last %s, deployment %s)", name, t.TaskDefinition, t.DesiredStatus, t.LastStatus, t.Deployment))
					}
				}
				if len(v.tasks) > 1 {
					slices.Sort(v.tasks)
					rep.violations = append(rep.violations, v)
				}
			}
		}
	}
	return rep
}

// TestReplayFindsTwoLiveTasks checks the checker: changes that undo what an
// agent did are listed; and a history in which a
// second task of an environment is created on an instance while the
// first is LOST there breaks "one and only one" at that index, as does
// one in which a replacement runs before the task it replaces stopped; a
// replacement placed beside a task asked to stop does not; a task created
// on an instance that does not match is listed.
func TestReplayFindsTwoLiveTasks(t *testing.T) {
	h := &storeHistory{seen: map[string]bool{}, latest: map[string]string{}}
	ready := histInstance{Cluster: "default", Status: "ready", Attributes: map[string]string{"zone": "a"}}
	other := histInstance{Cluster: "default", Status: "ready", Attributes: map[string]string{"zone": "b"}}
	task := func(instance, last string) histTask {
		return histTask{Environment: "e", Instance: instance, TaskDefinition: "d:1", DesiredStatus: "RUNNING", LastStatus: last}
	}
	startedAt := func(t histTask, at string) histTask { t.StartedAt = at; return t }
	inEnv := func(env string, t histTask) histTask { t.Environment = env; return t }
	stopping := task("i1", "RUNNING")
	stopping.DesiredStatus = "STOPPED"
	h.events = append(h.events, []histEvent{
		{index: 1, kind: instanceType.Kind, name: "i1", inst: ready},
		{index: 1, kind: instanceType.Kind, name: "i2", inst: other},
		{index: 1, kind: instanceType.Kind, name: "i3", inst: ready},
		{index: 2, kind: taskType.Kind, name: "t1", task: task("i1", "PENDING")},
		{index: 3, kind: taskType.Kind, name: "t1", task: task("i1", "LOST")},
		{index: 4, kind: taskType.Kind, name: "t2", task: task("i1", "PENDING")},
		{index: 5, kind: taskType.Kind, name: "t1", task: task("i1", "STOPPED")},
		// One batch: the old task stops as the new one is placed.
		{index: 6, kind: taskType.Kind, name: "t2", task: task("i1", "STOPPED")},
		{index: 6, kind: taskType.Kind, name: "t3", task: task("i1", "PENDING")},
		{index: 7, kind: taskType.Kind, name: "t4", task: task("i2", "PENDING")},
		{index: 8, kind: taskType.Kind, name: "t3", task: task("i1", "RUNNING")},
		// A handover: t3 is asked to stop as t5 is placed to replace it.
		{index: 9, kind: taskType.Kind, name: "t3", task: stopping},
		{index: 9, kind: taskType.Kind, name: "t5", task: task("i1", "PENDING")},
		// t5 runs before t3 stopped.
		{index: 10, kind: taskType.Kind, name: "t5", task: task("i1", "RUNNING")},
		{index: 11, kind: taskType.Kind, name: "t3", task: task("i1", "STOPPED")},
		// What a stale list of its tasks makes an agent do, on i3, whose
		// tasks cannot vanish: stop a task meant to run, start a STOPPED
		// one again, put one that ran back to PENDING, start one twice.
		{index: 12, kind: taskType.Kind, name: "t6", task: task("i3", "PENDING")},
		{index: 13, kind: taskType.Kind, name: "t6", task: startedAt(task("i3", "RUNNING"), "A")},
		{index: 14, kind: taskType.Kind, name: "t6", task: startedAt(task("i3", "STOPPED"), "A")},
		{index: 15, kind: taskType.Kind, name: "t6", task: startedAt(task("i3", "RUNNING"), "A")},
		{index: 16, kind: taskType.Kind, name: "t7", task: inEnv("f", startedAt(task("i3", "RUNNING"), "A"))},
		{index: 17, kind: taskType.Kind, name: "t7", task: inEnv("f", task("i3", "PENDING"))},
		{index: 18, kind: taskType.Kind, name: "t7", task: inEnv("f", startedAt(task("i3", "RUNNING"), "B"))},
	}...)
	rep := h.replay(func(env string, in histInstance, exists bool) (bool, string) {
		if !exists || in.Attributes["zone"] != "a" {
			return false, "not zone a"
		}
		return true, ""
	}, func(instance string) bool { return instance == "i1" })
	if len(rep.violations) != 2 || rep.violations[0].index != 4 || len(rep.violations[0].tasks) != 2 ||
		rep.violations[1].index != 10 || rep.violations[1].what != "running" {
		t.Errorf("violations %v, want one at index 4 with t1 and t2 meant to run, one at index 10 with t3 and t5 running", rep.violations)
	}
	if len(rep.misplacements) != 1 || rep.misplacements[0].task != "t4" {
		t.Errorf("misplacements %+v, want t4 on i2", rep.misplacements)
	}
	if rep.tasks != 7 || rep.indexes != 18 {
		t.Errorf("replayed %d tasks at %d indexes, want 7 at 18", rep.tasks, rep.indexes)
	}
	wantUndone := []string{"index 14: task t6", "index 15: task t6", "index 17: task t7", "index 18: task t7"}
	if len(rep.undone) != len(wantUndone) {
		t.Fatalf("undone %q, want changes at indexes 14, 15, 17 and 18", rep.undone)
	}
	for i, w := range wantUndone {
		if !strings.HasPrefix(rep.undone[i], w) {
			t.Errorf("undone[%d] = %q, want %s...", i, rep.undone[i], w)
		}
	}
}
