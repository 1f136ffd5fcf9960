package controllers

import (
	"slices"
	"strconv"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/scheduler"
)

func newTestCache(t *testing.T) *controller.Cache {
	t.Helper()
	c := controller.NewCache(controller.CheckReadOnly())
	if err := c.Declare(cachedTypes...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Verify(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func instanceRes(name string, v uint64, role string) *pbresource.Resource {
	data, _ := anypb.New(&pborch.Instance{Cluster: "default", Status: orchestrator.InstanceReady, Attributes: map[string]string{"role": role}})
	return &pbresource.Resource{Id: orchestrator.InstanceID(name), Version: strconv.FormatUint(v, 10), Data: data}
}

// TestInstanceViewsMatchingFollowsInstancesAndVersions: the instances an
// environment's group selects are worked out again when an instance
// changes in the cache (its revision moves; no mapper tells) and when the
// environment moves to another version, and not otherwise.
func TestInstanceViewsMatchingFollowsInstancesAndVersions(t *testing.T) {
	c := newTestCache(t)
	v := newInstanceViews(c)
	observe := func(res *pbresource.Resource, deleted bool) {
		c.Apply(controller.Event{Resource: res, Deleted: deleted})
	}
	for _, r := range []*pbresource.Resource{instanceRes("i1", 1, "log"), instanceRes("i2", 2, "web"), instanceRes("i3", 3, "log")} {
		observe(r, false)
	}
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
	check("first run", v.matching("default/ls", "v1", logs), "i1", "i3")
	// The same version again: the memo, even if asked with another group
	// (a version's group never changes; this shows nothing was redone).
	check("same version", v.matching("default/ls", "v1", webs), "i1", "i3")
	check("another version", v.matching("default/ls", "v2", webs), "i2")
	observe(instanceRes("i3", 4, "web"), false)
	check("an instance changed", v.matching("default/ls", "v2", webs), "i2", "i3")
	observe(instanceRes("i2", 1, "log"), false) // an old event: the cache keeps the newer
	check("an old event", v.matching("default/ls", "v2", webs), "i2", "i3")
	observe(instanceRes("i2", 5, "web"), true)
	check("an instance deleted", v.matching("default/ls", "v2", webs), "i3")
	v.forget("default/ls")
	check("the environment deleted and made again", v.matching("default/ls", "v2", webs), "i3")
	if got := v.all(); len(got) != 2 || got[0].Name != "i1" || got[1].Name != "i3" {
		t.Fatalf("all instances %v, want i1 and i3 by name", got)
	}
}

// TestTaskViewsAreTheCaches: an environment's tasks are its
// incarnation's in the cache, each with the view the cache derived when it
// applied the task: a change of a task makes its view again, a task that
// did not change keeps its view, and no one but the cache is told.
func TestTaskViewsAreTheCaches(t *testing.T) {
	c := newTestCache(t)
	env := scheduler.EnvironmentID("default", "ls")
	env.Uid = "u1"
	task := func(name, uid string, ver uint64, last string) *pbresource.Resource {
		data, _ := anypb.New(&pborch.Task{Instance: name, Environment: "ls", DesiredStatus: orchestrator.StatusRunning})
		report, _ := anypb.New(&pborch.TaskStatus{LastStatus: last})
		name = scheduler.TaskName("ls", name, 1)
		owner := scheduler.EnvironmentID("default", "ls")
		owner.Uid = uid
		return &pbresource.Resource{Id: orchestrator.TaskID("default", name), Owner: owner, Version: strconv.FormatUint(ver, 10), Data: data,
			Status: map[string]*pbresource.Status{orchestrator.TaskStatusKey: {Data: report}}}
	}
	write := func(res *pbresource.Resource, deleted bool) {
		c.Apply(controller.Event{Resource: res, Deleted: deleted})
	}
	views := func() map[string]*storedTask {
		out := map[string]*storedTask{}
		for _, st := range tasksOf(c, env) {
			out[st.view.Name] = st
		}
		return out
	}
	write(task("i1", "u1", 1, orchestrator.StatusPending), false)
	write(task("i2", "u1", 2, orchestrator.StatusRunning), false)
	write(task("i3", "u0", 3, orchestrator.StatusRunning), false) // an earlier incarnation's
	first := views()
	if len(first) != 2 || first[scheduler.TaskName("ls", "i1", 1)] == nil || first[scheduler.TaskName("ls", "i2", 1)] == nil {
		t.Fatalf("views %v, want the tasks on i1 and i2 (not the earlier incarnation's)", first)
	}
	if first[scheduler.TaskName("ls", "i1", 1)].view.Seq != 1 || first[scheduler.TaskName("ls", "i1", 1)].view.Last != orchestrator.StatusPending {
		t.Fatalf("view of the task on i1: %+v", first[scheduler.TaskName("ls", "i1", 1)].view)
	}

	write(task("i1", "u1", 4, orchestrator.StatusRunning), false)
	write(task("i2", "u1", 2, orchestrator.StatusRunning), true)
	write(task("i4", "u1", 5, orchestrator.StatusPending), false)
	next := views()
	if len(next) != 2 || next[scheduler.TaskName("ls", "i1", 1)] == nil || next[scheduler.TaskName("ls", "i4", 1)] == nil {
		t.Fatalf("views %v, want the tasks on i1 and i4 (i2's deleted)", next)
	}
	if next[scheduler.TaskName("ls", "i1", 1)].view.Last != orchestrator.StatusRunning {
		t.Fatalf("the view of the task on i1 did not follow its change: %+v", next[scheduler.TaskName("ls", "i1", 1)].view)
	}
	write(task("i1", "u1", 6, orchestrator.StatusRunning), false)
	again := views()
	if i4 := scheduler.TaskName("ls", "i4", 1); again[i4] != next[i4] {
		t.Fatal("the view of a task that did not change was made again")
	}
	if i1 := scheduler.TaskName("ls", "i1", 1); again[i1] == next[i1] {
		t.Fatal("the view of a task that changed was kept")
	}

	// A new incarnation of the environment sees only its own tasks.
	env.Uid = "u0"
	if got := views(); len(got) != 1 || got[scheduler.TaskName("ls", "i3", 1)] == nil {
		t.Fatalf("views of incarnation u0: %v, want the task on i3", got)
	}
}

// TestBlockedByFollowsTheStatus: a task's change maps to the environments
// whose status, as the cache holds it, lists its instance as blocked, and
// to those whose list was cut short (blocked on more instances than it
// names) whatever the instance; to none once the status lists none.
func TestBlockedByFollowsTheStatus(t *testing.T) {
	c := newTestCache(t)
	env := func(name string, version uint64, blocked ...string) *pbresource.Resource {
		st := &pbscheduler.EnvironmentStatus{Status: scheduler.EnvActive}
		for _, in := range blocked {
			st.Blocked = append(st.Blocked, &pbscheduler.BlockedInstance{Instance: in, Reason: "host port 8080/tcp is taken by task t"})
		}
		data, _ := anypb.New(st)
		spec, _ := anypb.New(&pbscheduler.Environment{})
		id := scheduler.EnvironmentID("default", name)
		id.Uid = "u-" + name
		return &pbresource.Resource{Id: id, Version: strconv.FormatUint(version, 10), Data: spec,
			Status: map[string]*pbresource.Status{scheduler.StatusKey: {Data: data}}}
	}
	task := func(instance string) *pbresource.Resource {
		data, _ := anypb.New(&pborch.Task{TaskDefinition: "web:1", Instance: instance, DesiredStatus: orchestrator.StatusRunning})
		res := &pbresource.Resource{Id: orchestrator.TaskID("default", "t-"+instance), Version: "1", Data: data}
		res.Id.Uid = "u"
		c.Apply(controller.Event{Resource: res})
		return res
	}
	names := func(reqs []controller.Request) []string {
		var out []string
		for _, r := range reqs {
			out = append(out, r.ID.GetName())
		}
		slices.Sort(out)
		return out
	}
	many := make([]string, scheduler.MaxListedInstances)
	for i := range many {
		many[i] = "m" + strconv.Itoa(i)
	}
	c.Apply(controller.Event{Resource: env("a", 1, "i1", "i2")})
	c.Apply(controller.Event{Resource: env("b", 1, "i2")})
	c.Apply(controller.Event{Resource: env("c", 1)})
	c.Apply(controller.Event{Resource: env("d", 1, many...)})
	for _, tc := range []struct {
		instance string
		want     []string
	}{
		{"i1", []string{"a", "d"}},
		{"i2", []string{"a", "b", "d"}},
		{"i9", []string{"d"}},
	} {
		if got := names(blockedBy(c, task(tc.instance))); !slices.Equal(got, tc.want) {
			t.Errorf("a task on %s maps to %v, want %v", tc.instance, got, tc.want)
		}
	}
	c.Apply(controller.Event{Resource: env("a", 2)})
	c.Apply(controller.Event{Resource: env("d", 2, "m1")})
	if got := names(blockedBy(c, task("i1"))); len(got) != 0 {
		t.Errorf("a task on i1 maps to %v once nothing is blocked there", got)
	}
	// A deleted task is not in the cache: its own data names its instance.
	gone := task("i2")
	c.Apply(controller.Event{Resource: gone, Deleted: true})
	if got := names(blockedBy(c, gone)); !slices.Equal(got, []string{"b"}) {
		t.Errorf("a deleted task on i2 maps to %v, want b", got)
	}
}
