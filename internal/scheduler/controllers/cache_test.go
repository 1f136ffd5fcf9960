package controllers

import (
	"slices"
	"strconv"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/scheduler"
)

func taskRes(t *testing.T, name string, version uint64) *pbresource.Resource {
	data, err := anypb.New(&pborch.Task{Instance: "i1", LastStatus: orchestrator.StatusRunning})
	if err != nil {
		t.Fatal(err)
	}
	return &pbresource.Resource{
		Id:      orchestrator.TaskID("default", name),
		Owner:   scheduler.EnvironmentID("default", "ls"),
		Version: strconv.FormatUint(version, 10),
		Data:    data,
	}
}

func stored(t *testing.T, name string, version uint64) *storedTask {
	res := taskRes(t, name, version)
	return &storedTask{res: res, view: scheduler.TaskView{Name: name}}
}

// TestCachePrimingKeepsWhatTheWatchesSaw: events that arrive while an
// environment's tasks are being listed are not lost, and a listing that
// predates them does not roll them back.
func TestCachePrimingKeepsWhatTheWatchesSaw(t *testing.T) {
	c := newCache()
	key := "default/ls"
	c.observeTask(taskRes(t, "early", 1), false) // before priming: ignored
	c.beginPrime(key)
	c.observeTask(taskRes(t, "a", 5), true)  // deleted while listing
	c.observeTask(taskRes(t, "b", 7), false) // updated while listing
	c.primeTasks(key, []*storedTask{stored(t, "a", 5), stored(t, "b", 6), stored(t, "c", 3)})
	c.observeTask(taskRes(t, "c", 2), false) // a late event: older than what is held
	_, _, tasks, primed := c.snapshot(key)
	if !primed {
		t.Fatal("not primed")
	}
	got := map[string]string{}
	for _, st := range tasks {
		got[st.res.GetId().GetName()] = st.res.GetVersion()
	}
	want := map[string]string{"b": "7", "c": "3"}
	if len(got) != len(want) || got["b"] != "7" || got["c"] != "3" {
		t.Fatalf("cache holds %v, want %v", got, want)
	}
}

func TestCacheInstancesNeverRollBack(t *testing.T) {
	c := newCache()
	in := func(v uint64, role string) *pbresource.Resource {
		data, _ := anypb.New(&pborch.Instance{Cluster: "default", Status: orchestrator.InstanceReady, Attributes: map[string]string{"role": role}})
		return &pbresource.Resource{Id: orchestrator.InstanceID("i1"), Version: strconv.FormatUint(v, 10), Data: data}
	}
	c.observeInstance(in(9, "new"), false)
	c.primeInstances([]*pbresource.Resource{in(8, "old")})
	ins, primed, _, _ := c.snapshot("x")
	if !primed || len(ins) != 1 || ins[0].Attributes["role"] != "new" {
		t.Fatalf("instances %v, want i1 with role new", ins)
	}
	c.observeInstance(in(10, "new"), true)
	c.primeInstances([]*pbresource.Resource{in(10, "new")})
	if ins, _, _, _ := c.snapshot("x"); len(ins) != 0 {
		t.Fatalf("a deleted instance came back from an older listing: %v", ins)
	}
}

// TestCacheMatchingFollowsInstancesAndVersions: the instances an
// environment's group selects are worked out again when an instance
// changes and when the environment moves to another version, and not
// otherwise.
func TestCacheMatchingFollowsInstancesAndVersions(t *testing.T) {
	c := newCache()
	in := func(name string, v uint64, role string) *pbresource.Resource {
		data, _ := anypb.New(&pborch.Instance{Cluster: "default", Status: orchestrator.InstanceReady, Attributes: map[string]string{"role": role}})
		return &pbresource.Resource{Id: orchestrator.InstanceID(name), Version: strconv.FormatUint(v, 10), Data: data}
	}
	c.primeInstances([]*pbresource.Resource{in("i1", 1, "log"), in("i2", 2, "web"), in("i3", 3, "log")})
	logs, err := scheduler.ParseGroup("g", &pbscheduler.InstanceGroup{Cluster: "default", Attributes: []string{"role=log"}})
	if err != nil {
		t.Fatal(err)
	}
	webs, err := scheduler.ParseGroup("g", &pbscheduler.InstanceGroup{Cluster: "default", Attributes: []string{"role=web"}})
	if err != nil {
		t.Fatal(err)
	}
	names := func(m scheduler.Matching) []string {
		var out []string
		for _, in := range m.Selected {
			out = append(out, in.Name)
		}
		return out
	}
	check := func(what string, m scheduler.Matching, want ...string) {
		t.Helper()
		if got := names(m); !slices.Equal(got, want) {
			t.Fatalf("%s: selected %v, want %v", what, got, want)
		}
	}
	check("first run", c.matching("default/ls", "v1", logs), "i1", "i3")
	// The same version again: the memo, even if asked with another group
	// (a version's group never changes; this shows nothing was redone).
	check("same version", c.matching("default/ls", "v1", webs), "i1", "i3")
	check("another version", c.matching("default/ls", "v2", webs), "i2")
	c.observeInstance(in("i3", 4, "web"), false)
	check("an instance changed", c.matching("default/ls", "v2", webs), "i2", "i3")
	c.observeInstance(in("i2", 2, "log"), false) // an old event: nothing changes
	check("an old event", c.matching("default/ls", "v2", webs), "i2", "i3")
	c.observeInstance(in("i2", 5, "web"), true)
	check("an instance deleted", c.matching("default/ls", "v2", webs), "i3")
	c.reset()
	c.primeInstances([]*pbresource.Resource{in("i1", 6, "web")})
	check("a new term", c.matching("default/ls", "v2", webs), "i1")
}
