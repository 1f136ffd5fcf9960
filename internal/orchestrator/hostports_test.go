package orchestrator_test

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"pgregory.net/rapid"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/orchestrator"
)

// fataler is what the helpers need of a *testing.T or *rapid.T.
type fataler interface {
	Helper()
	Fatal(...any)
}

// cachedTask is a task as the cache holds it: placed on instance, running
// ref, with its agent's last status (none: "").
func cachedTask(t fataler, ns, name, instance, ref, last string, version uint64) *pbresource.Resource {
	t.Helper()
	data, err := anypb.New(&pborch.Task{TaskDefinition: ref, Instance: instance, DesiredStatus: orchestrator.StatusRunning})
	if err != nil {
		t.Fatal(err)
	}
	id := orchestrator.TaskID(ns, name)
	id.Uid = "u-" + name
	res := &pbresource.Resource{Id: id, Data: data, Version: strconv.FormatUint(version, 10)}
	if last != "" {
		st, err := anypb.New(&pborch.TaskStatus{LastStatus: last})
		if err != nil {
			t.Fatal(err)
		}
		res.Status = map[string]*pbresource.Status{orchestrator.TaskStatusKey: {Data: st}}
	}
	return res
}

func cachedDefinition(t fataler, ns, family string, rev int64, hostPorts ...uint32) *pbresource.Resource {
	t.Helper()
	td := &pborch.TaskDefinition{Family: family, Revision: rev, Network: orchestrator.NetworkBridge}
	for i, p := range hostPorts {
		td.Ports = append(td.Ports, &pborch.PortMapping{Name: fmt.Sprintf("p%d", i), ContainerPort: 80 + uint32(i), HostPort: p, Protocol: orchestrator.ProtocolTCP})
	}
	data, err := anypb.New(td)
	if err != nil {
		t.Fatal(err)
	}
	id := orchestrator.TaskDefinitionID(ns, family, rev)
	id.Uid = "u-" + family
	return &pbresource.Resource{Id: id, Data: data, Version: "1"}
}

func object(t fataler, res *pbresource.Resource) *controller.Object {
	t.Helper()
	m, err := res.GetData().UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	return &controller.Object{Resource: res, Data: m}
}

func tcp(p uint32) orchestrator.HostPort {
	return orchestrator.HostPort{Port: p, Protocol: orchestrator.ProtocolTCP}
}

// PortHolders: who holds fixed host ports on an instance, from the tasks
// and their definitions alone.
func TestPortHolders(t *testing.T) {
	defs := map[string][]orchestrator.HostPort{
		"default/web:1":   {tcp(8080)},
		"default/free:1":  nil, // host_port 0 only, or host network
		"team-b/api:1":    {tcp(8080), tcp(9090)},
		"default/other:1": {tcp(7070)},
	}
	ports := func(ns, ref string) []orchestrator.HostPort { return defs[ns+"/"+ref] }
	task := func(ns, name, instance, ref, last string) *controller.Object {
		return object(t, cachedTask(t, ns, name, instance, ref, last, 1))
	}
	for _, tc := range []struct {
		name     string
		instance string
		ns       string
		tasks    []*controller.Object
		want     []orchestrator.PortHolder
	}{
		{name: "no tasks", instance: "i1", ns: "default"},
		{name: "a running task of a fixed port holds it", instance: "i1", ns: "default",
			tasks: []*controller.Object{task("default", "t1", "i1", "web:1", orchestrator.StatusRunning)},
			want:  []orchestrator.PortHolder{{Task: "t1", Ports: []orchestrator.HostPort{tcp(8080)}}}},
		{name: "a task not yet reported holds its ports (placed is enough)", instance: "i1", ns: "default",
			tasks: []*controller.Object{task("default", "t1", "i1", "web:1", "")},
			want:  []orchestrator.PortHolder{{Task: "t1", Ports: []orchestrator.HostPort{tcp(8080)}}}},
		{name: "a LOST task holds them: its agent may come back", instance: "i1", ns: "default",
			tasks: []*controller.Object{task("default", "t1", "i1", "web:1", orchestrator.StatusLost)},
			want:  []orchestrator.PortHolder{{Task: "t1", Ports: []orchestrator.HostPort{tcp(8080)}}}},
		{name: "a STOPPED task holds nothing", instance: "i1", ns: "default",
			tasks: []*controller.Object{task("default", "t1", "i1", "web:1", orchestrator.StatusStopped)}},
		{name: "a task on another instance holds nothing here", instance: "i1", ns: "default",
			tasks: []*controller.Object{task("default", "t1", "i2", "web:1", orchestrator.StatusRunning)}},
		{name: "a task without fixed host ports holds nothing", instance: "i1", ns: "default",
			tasks: []*controller.Object{task("default", "t1", "i1", "free:1", orchestrator.StatusRunning)}},
		{name: "a task whose definition is unknown holds nothing", instance: "i1", ns: "default",
			tasks: []*controller.Object{task("default", "t1", "i1", "gone:3", orchestrator.StatusRunning)}},
		{name: "a task of another namespace is named with it", instance: "i1", ns: "default",
			tasks: []*controller.Object{task("team-b", "t9", "i1", "api:1", orchestrator.StatusRunning)},
			want:  []orchestrator.PortHolder{{Task: "team-b/t9", Ports: []orchestrator.HostPort{tcp(8080), tcp(9090)}}}},
		{name: "its definition is read in its own namespace", instance: "i1", ns: "team-b",
			tasks: []*controller.Object{task("team-b", "t9", "i1", "api:1", ""), task("team-b", "t8", "i1", "web:1", "")},
			want:  []orchestrator.PortHolder{{Task: "t9", Ports: []orchestrator.HostPort{tcp(8080), tcp(9090)}}}},
		{name: "several holders, in the tasks' order", instance: "i1", ns: "default",
			tasks: []*controller.Object{
				task("default", "t1", "i1", "web:1", orchestrator.StatusRunning),
				task("default", "t2", "i1", "other:1", orchestrator.StatusPending),
				task("default", "t3", "i1", "web:1", orchestrator.StatusStopped),
			},
			want: []orchestrator.PortHolder{{Task: "t1", Ports: []orchestrator.HostPort{tcp(8080)}}, {Task: "t2", Ports: []orchestrator.HostPort{tcp(7070)}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := orchestrator.PortHolders(tc.instance, tc.ns, tc.tasks, ports)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("PortHolders = %v, want %v", got, tc.want)
			}
		})
	}
}

// PortHolderOf: who holds one port, the replaced task left out.
func TestPortHolderOf(t *testing.T) {
	holders := []orchestrator.PortHolder{
		{Task: "t1", Ports: []orchestrator.HostPort{tcp(8080)}},
		{Task: "t2", Ports: []orchestrator.HostPort{tcp(9090), {Port: 8080, Protocol: orchestrator.ProtocolUDP}}},
	}
	for _, tc := range []struct {
		name   string
		port   orchestrator.HostPort
		except string
		want   string // "" for free
	}{
		{name: "held", port: tcp(8080), want: "t1"},
		{name: "held by the second", port: tcp(9090), want: "t2"},
		{name: "the same number in another protocol is another port", port: orchestrator.HostPort{Port: 8080, Protocol: orchestrator.ProtocolUDP}, want: "t2"},
		{name: "free", port: tcp(7070)},
		{name: "held by the task replaced: free for its replacement", port: tcp(8080), except: "t1"},
		{name: "another holder still counts", port: tcp(9090), except: "t1", want: "t2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, taken := orchestrator.PortHolderOf(holders, tc.port, tc.except)
			if taken != (tc.want != "") || h.Task != tc.want {
				t.Fatalf("PortHolderOf(%s, except %q) = %q, %v; want %q", tc.port, tc.except, h.Task, taken, tc.want)
			}
		})
	}
	if _, taken := orchestrator.PortHolderOf(nil, tcp(80), ""); taken {
		t.Fatal("a port is taken among no holders")
	}
}

// After any sequence of task changes (placed, reported RUNNING, LOST or
// STOPPED, deleted; on random instances, of definitions with and without
// fixed host ports, in two namespaces) the cache's index answers, for
// every instance, what a recomputation over every cached task answers,
// and what a model of the rules kept beside it answers.
func TestPortHoldersIndexMatchesRecomputation(t *testing.T) {
	instances := []string{"i1", "i2", "i3"}
	namespaces := []string{"default", "team-b"}
	refs := []string{"web:1", "free:1", "api:1", "gone:1"}
	// The definitions: web publishes 8080, api 8080 and 9090 in default
	// and 9090 alone in team-b; free publishes no fixed port; gone is not
	// registered.
	defPorts := map[string][]uint32{"default/web:1": {8080}, "team-b/web:1": {8080}, "default/free:1": {0}, "team-b/free:1": nil,
		"default/api:1": {8080, 9090}, "team-b/api:1": {9090}}
	rapid.Check(t, func(rt *rapid.T) {
		c := controller.NewCache(controller.CheckReadOnly())
		if err := c.Declare(orchestrator.HostPortsCached...); err != nil {
			rt.Fatal(err)
		}
		for key, ports := range defPorts {
			var ns, ref string
			for i := range key {
				if key[i] == '/' {
					ns, ref = key[:i], key[i+1:]
					break
				}
			}
			family, rev, err := orchestrator.ParseTaskDefinitionRef(ref)
			if err != nil {
				rt.Fatal(err)
			}
			c.Apply(controller.Event{Resource: cachedDefinition(rt, ns, family, rev, ports...)})
		}
		type modelTask struct{ ns, instance, ref, last string }
		model := map[string]modelTask{} // ns/name
		stored := map[string]*pbresource.Resource{}
		var version uint64
		steps := rapid.IntRange(1, 80).Draw(rt, "steps")
		for range steps {
			version++
			ns := rapid.SampledFrom(namespaces).Draw(rt, "namespace")
			name := rapid.SampledFrom([]string{"a", "b", "c", "d", "e", "f"}).Draw(rt, "task")
			key := ns + "/" + name
			cur, exists := stored[key]
			switch op := rapid.SampledFrom([]string{"place", "report", "delete"}).Draw(rt, "op"); {
			case op == "place" && !exists:
				m := modelTask{ns: ns, instance: rapid.SampledFrom(instances).Draw(rt, "instance"), ref: rapid.SampledFrom(refs).Draw(rt, "ref")}
				stored[key] = cachedTask(rt, ns, name, m.instance, m.ref, "", version)
				model[key] = m
				c.Apply(controller.Event{Resource: stored[key]})
			case op == "report" && exists:
				m := model[key]
				m.last = rapid.SampledFrom([]string{orchestrator.StatusPending, orchestrator.StatusRunning, orchestrator.StatusLost, orchestrator.StatusStopped}).Draw(rt, "status")
				next := cachedTask(rt, ns, name, m.instance, m.ref, m.last, version)
				stored[key], model[key] = next, m
				c.Apply(controller.Event{Resource: proto.Clone(next).(*pbresource.Resource)})
			case op == "delete" && exists:
				c.Apply(controller.Event{Resource: cur, Deleted: true})
				delete(stored, key)
				delete(model, key)
			}

			all := c.List(orchestrator.TaskType)
			for _, in := range instances {
				for _, asker := range namespaces {
					got := orchestrator.PortHoldersOn(c, in, asker)
					again := orchestrator.PortHolders(in, asker, all, orchestrator.CachedHostPorts(c))
					if !reflect.DeepEqual(got, again) {
						rt.Fatalf("instance %s, asked from %s: the index gives %v, a recomputation over every task %v", in, asker, got, again)
					}
					var want []string
					for k, m := range model {
						held := false
						for _, p := range defPorts[m.ns+"/"+m.ref] {
							held = held || p != 0
						}
						if m.instance != in || m.last == orchestrator.StatusStopped || !held {
							continue
						}
						if m.ns != asker {
							want = append(want, k)
						} else {
							want = append(want, k[len(m.ns)+1:])
						}
					}
					var names []string
					for _, h := range got {
						names = append(names, h.Task)
					}
					slices.Sort(names)
					slices.Sort(want)
					if !slices.Equal(names, want) {
						rt.Fatalf("instance %s, asked from %s: holders %v, the model says %v", in, asker, names, want)
					}
				}
				// The index files exactly the live tasks of the instance.
				var live, filed []string
				for k, m := range model {
					if m.instance == in && m.last != orchestrator.StatusStopped {
						live = append(live, k)
					}
				}
				for _, o := range c.ByIndex(orchestrator.TaskType, orchestrator.LiveTasksByInstance.Name, in) {
					filed = append(filed, o.Resource.GetId().GetTenancy().GetNamespace()+"/"+o.Resource.GetId().GetName())
				}
				slices.Sort(live)
				slices.Sort(filed)
				if !slices.Equal(live, filed) {
					rt.Fatalf("instance %s: the index files %v, the live tasks are %v", in, filed, live)
				}
			}
		}
		if err := c.Verify(); err != nil {
			rt.Fatal(err)
		}
	})
}
