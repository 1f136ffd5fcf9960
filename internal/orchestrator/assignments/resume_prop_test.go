package assignments

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"pgregory.net/rapid"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// resumeRun is one run of the property: an agent of instance (its tasks
// named prefix-*) over the shared harness, which loses its stream and
// resumes it while the store changes.
type resumeRun struct {
	t        *rapid.T
	h        *harness
	prefix   string
	instance string
	other    string
	// where is the instance of each task that exists, by short name.
	where map[string]string
	clock int64 // the agent's report times

	agent  *agentView
	stream *eventStream
	cut    func()
}

func (r *resumeRun) name(short string) string { return r.prefix + "-" + short }

func (r *resumeRun) read(short string) *pbresource.Resource {
	resp, err := r.h.api.Read(context.Background(), &pbresource.ReadRequest{Id: orchestrator.TaskID("default", r.name(short))})
	if err != nil {
		r.t.Fatal(err)
	}
	return resp.GetResource()
}

// expectTasks reads n task events off the open stream into the agent's
// view (definitions ahead of them included).
func (r *resumeRun) expectTasks(n int) {
	if r.stream == nil {
		return
	}
	for n > 0 {
		ev := r.stream.recv(r.t)
		r.agent.take(r.t, ev, nil, false)
		if !ids.SameType(ev.GetResource().GetId().GetType(), orchestrator.TaskDefinitionType) {
			n--
		}
	}
}

// onMine is 1 when instance is the agent's: a change there is streamed.
func (r *resumeRun) onMine(instance string) int {
	if instance == r.instance {
		return 1
	}
	return 0
}

func (r *resumeRun) place(short, instance string, rev int) {
	data, _ := anypb.New(&pborch.Task{TaskDefinition: fmt.Sprintf("web:%d", rev), Instance: instance, StartedBy: "test"})
	if _, err := r.h.api.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: orchestrator.TaskID("default", r.name(short)), Data: data}}); err != nil {
		r.t.Fatal(err)
	}
	r.where[short] = instance
}

func (r *resumeRun) remove(short string) {
	if _, err := r.h.api.Delete(context.Background(), &pbresource.DeleteRequest{Id: orchestrator.TaskID("default", r.name(short))}); err != nil {
		r.t.Fatal(err)
	}
	delete(r.where, short)
}

// report writes the task's status["agent"]. byAgent: a report of the
// agent's own (a new reported_at), which the stream keeps from it; learns:
// the agent got the write's answer and holds what was stored. Otherwise
// the servers' (marking it lost, say), which is streamed.
// It returns whether the store wrote anything (a status equal to the one
// stored is no write).
func (r *resumeRun) report(short, last string, byAgent, learns bool) (wrote bool) {
	res := r.read(short)
	st := &pborch.TaskStatus{}
	if cur := orchestrator.TaskStatusOf(res); cur != nil {
		st = proto.Clone(cur).(*pborch.TaskStatus)
	}
	st.LastStatus = last
	if byAgent {
		r.clock++
		st.ReportedAt = timestamppb.New(time.Unix(r.clock, 0))
	}
	payload, _ := anypb.New(st)
	out, err := r.h.api.WriteStatus(resource.AsAgent(context.Background(), r.where[short]), &pbresource.WriteStatusRequest{
		Id: res.GetId(), Version: res.GetVersion(), Key: orchestrator.TaskStatusKey, Status: &pbresource.Status{Data: payload}})
	if err != nil {
		r.t.Fatal(err)
	}
	stored := out.GetResource()
	r.h.caughtUp(stored.GetVersion())
	if byAgent && learns {
		if _, ok := r.agent.tasks[stored.GetId().GetUid()]; ok {
			r.agent.tasks[stored.GetId().GetUid()] = stored
			var v uint64
			fmt.Sscan(stored.GetVersion(), &v)
			r.agent.index = max(r.agent.index, v)
		}
	}
	return stored.GetVersion() != res.GetVersion()
}

// settle waits until the hub has every write so far: it writes a task of
// no run's instance, and waits for the hub to reach it (a deletion's
// answer carries no index to wait for).
func (r *resumeRun) settle() {
	// A label never written before: a write equal to what is stored is
	// none, and its answer an index the hub may already have passed.
	data, _ := anypb.New(&pborch.Task{TaskDefinition: "web:1", Instance: "nobody", StartedBy: "test"})
	r.h.write(&pbresource.Resource{Id: orchestrator.TaskID("default", "settle"), Data: data, Metadata: map[string]string{"n": fmt.Sprint(settles.Add(1))}})
}

var settles atomic.Int64

// connect opens the agent's stream (resumed once it holds a whole view)
// and reads its start; a resumed start must bring the agent to what a
// fresh snapshot shows, and carry no definition the agent held.
func (r *resumeRun) connect() {
	heldDefs := maps(r.agent.defs)
	resumes := r.agent.whole
	r.stream, r.cut = r.h.stream(r.agent.request(r.instance))
	var start []*pbresource.WatchEvent
	var carried []string
	for {
		ev := r.stream.recv(r.t)
		if ids.SameType(ev.GetResource().GetId().GetType(), orchestrator.TaskDefinitionType) {
			carried = append(carried, ev.GetResource().GetId().GetName())
		}
		r.agent.take(r.t, ev, &start, true)
		if ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
			if ev.GetResumed() != resumes {
				r.t.Fatalf("END_OF_SNAPSHOT resumed=%v; the agent resumed: %v", ev.GetResumed(), resumes)
			}
			break
		}
	}
	for _, d := range carried {
		if resumes && heldDefs[d] {
			r.t.Fatalf("the resumed stream carried %s, which the agent held", d)
		}
	}
	fresh := newAgentView()
	fs, stop := r.h.stream(fresh.request(r.instance))
	fresh.readStart(r.t, fs)
	stop()
	if a, f := versions(r.agent.tasks), versions(fresh.tasks); !slices.Equal(a, f) {
		r.t.Fatalf("after its stream's start (resumed: %v) the agent holds\n%q\na fresh snapshot shows\n%q", resumes, a, f)
	}
}

func maps(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// An agent that holds what its streams showed it (and its own reports'
// answers), resuming after any sequence of changes — tasks placed,
// changed, deleted, deleted and placed again under the same name, on its
// instance or another, reports of its own it did or did not hear back
// about, the servers' reports — holds after the resumed start exactly
// what a fresh snapshot shows, and is sent no definition it held.
func TestResumedStreamEqualsAFreshSnapshot(t *testing.T) {
	h := newHarness(t)
	for rev := 1; rev <= 3; rev++ {
		h.registerDefinition("web", int64(rev))
	}
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		r := &resumeRun{t: rt, h: h, prefix: fmt.Sprintf("r%d", run), where: map[string]string{}, agent: newAgentView()}
		r.instance, r.other = r.prefix+"-i1", r.prefix+"-i2"
		shorts := rapid.SampledFrom([]string{"a", "b", "c", "d"})
		instances := rapid.SampledFrom([]string{r.instance, r.instance, r.other})
		defer func() {
			if r.cut != nil {
				r.cut()
			}
		}()
		r.connect()
		steps := rapid.IntRange(1, 30).Draw(rt, "steps")
		for range steps {
			short := shorts.Draw(rt, "task")
			inst, exists := r.where[short]
			switch op := rapid.SampledFrom([]string{"place", "change", "delete", "again", "report", "cut", "connect"}).Draw(rt, "op"); {
			case op == "place" && !exists:
				to := instances.Draw(rt, "instance")
				r.place(short, to, rapid.IntRange(1, 3).Draw(rt, "revision"))
				r.settle()
				r.expectTasks(r.onMine(to))
			case op == "change" && exists:
				res := r.read(short)
				res.Metadata = map[string]string{"n": fmt.Sprint(rapid.IntRange(0, 2).Draw(rt, "label"))}
				out, err := h.api.Write(context.Background(), &pbresource.WriteRequest{Resource: res})
				if err != nil {
					rt.Fatal(err)
				}
				r.settle()
				if out.GetResource().GetVersion() != res.GetVersion() {
					r.expectTasks(r.onMine(inst))
				}
			case op == "delete" && exists:
				r.remove(short)
				r.settle()
				r.expectTasks(r.onMine(inst))
			case op == "again" && exists:
				r.remove(short)
				to := instances.Draw(rt, "instance")
				r.place(short, to, rapid.IntRange(1, 3).Draw(rt, "revision"))
				r.settle()
				r.expectTasks(r.onMine(inst) + r.onMine(to))
			case op == "report" && exists:
				byAgent := inst == r.instance && r.stream != nil && rapid.Bool().Draw(rt, "by the agent")
				wrote := r.report(short, rapid.SampledFrom([]string{orchestrator.StatusRunning, orchestrator.StatusStopped}).Draw(rt, "status"),
					byAgent, byAgent && rapid.Bool().Draw(rt, "heard back"))
				r.settle()
				if wrote && !byAgent {
					r.expectTasks(r.onMine(inst))
				}
			case op == "cut" && r.stream != nil:
				r.cut()
				r.stream, r.cut = nil, nil
			case op == "connect" && r.stream == nil:
				r.connect()
			}
		}
		if r.stream != nil {
			r.cut()
			r.stream, r.cut = nil, nil
		}
		r.connect()
	})
}
