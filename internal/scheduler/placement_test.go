package scheduler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

func hostPort(p uint32, proto string) orchestrator.HostPort {
	return orchestrator.HostPort{Port: p, Protocol: proto}
}

func TestNeedsOf(t *testing.T) {
	td := &pborch.TaskDefinition{Network: "bridge", Ports: []*pborch.PortMapping{
		{Name: "http", ContainerPort: 80, HostPort: 8080},
		{Name: "any", ContainerPort: 81},
		{Name: "dns", ContainerPort: 53, HostPort: 53, Protocol: "udp"},
	}}
	n := NeedsOf(td)
	if !n.Bridge || fmt.Sprint(n.HostPorts) != "[53/udp 8080/tcp]" {
		t.Fatalf("NeedsOf = %+v", n)
	}
	if n := NeedsOf(&pborch.TaskDefinition{}); n.Bridge || n.HostPorts != nil {
		t.Fatalf("a host task needs %+v", n)
	}
}

func TestBlocked(t *testing.T) {
	web := Needs{Bridge: true, HostPorts: []orchestrator.HostPort{hostPort(8080, "tcp")}}
	bridge := map[string]string{orchestrator.AttrNetworkBridge: "true"}
	for _, tc := range []struct {
		name     string
		needs    Needs
		attrs    map[string]string
		holders  []PortHolder
		replaces string
		want     string
	}{
		{name: "a host task without ports goes anywhere", needs: Needs{}, attrs: nil},
		{name: "a bridge task goes where network.bridge is true", needs: Needs{Bridge: true}, attrs: bridge},
		{name: "not where it is false", needs: Needs{Bridge: true}, attrs: map[string]string{"network.bridge": "false"},
			want: "the task definition's network is bridge, and the instance cannot run bridge tasks (network.bridge=false)"},
		{name: "nor where it is not set", needs: Needs{Bridge: true}, attrs: map[string]string{"role": "web"},
			want: "the task definition's network is bridge, and the instance does not say it runs bridge tasks (no network.bridge attribute)"},
		{name: "a free port", needs: web, attrs: bridge,
			holders: []PortHolder{{Task: "other", Ports: []orchestrator.HostPort{hostPort(9090, "tcp")}}}},
		{name: "the same number in udp is another port", needs: web, attrs: bridge,
			holders: []PortHolder{{Task: "dns", Ports: []orchestrator.HostPort{hostPort(8080, "udp")}}}},
		{name: "a port taken by another task", needs: web, attrs: bridge,
			holders: []PortHolder{{Task: "a", Ports: []orchestrator.HostPort{hostPort(9090, "tcp")}}, {Task: "b", Ports: []orchestrator.HostPort{hostPort(22, "tcp"), hostPort(8080, "tcp")}}},
			want:    "host port 8080/tcp is taken by task b"},
		{name: "a port of another namespace's task", needs: web, attrs: bridge,
			holders: []PortHolder{{Task: "team-b/web-1", Ports: []orchestrator.HostPort{hostPort(8080, "tcp")}}},
			want:    "host port 8080/tcp is taken by task team-b/web-1"},
		{name: "the task replaced frees its ports", needs: web, attrs: bridge, replaces: "old",
			holders: []PortHolder{{Task: "old", Ports: []orchestrator.HostPort{hostPort(8080, "tcp")}}}},
		{name: "only the task replaced", needs: web, attrs: bridge, replaces: "old",
			holders: []PortHolder{{Task: "old", Ports: []orchestrator.HostPort{hostPort(8080, "tcp")}}, {Task: "by-hand", Ports: []orchestrator.HostPort{hostPort(8080, "tcp")}}},
			want:    "host port 8080/tcp is taken by task by-hand"},
		{name: "the network is checked first", needs: web, attrs: nil,
			holders: []PortHolder{{Task: "b", Ports: []orchestrator.HostPort{hostPort(8080, "tcp")}}},
			want:    "the task definition's network is bridge, and the instance does not say it runs bridge tasks (no network.bridge attribute)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Blocked(tc.needs, tc.attrs, tc.holders, tc.replaces); got != tc.want {
				t.Fatalf("Blocked = %q\nwant      %q", got, tc.want)
			}
		})
	}
}

// TestDecideBlocked walks the instance decision where the target cannot
// be placed: nothing is placed or stopped, what runs goes on running, and
// the instance says why.
func TestDecideBlocked(t *testing.T) {
	holders := map[string][]PortHolder{}
	target := func(replace bool) Target {
		return Target{TaskDefinition: "d:2", Group: groupOf(t), Replace: replace,
			Rollout: Rollout{MinHealthyPercent: 75, HealthyDeadline: time.Minute, ProgressDeadline: time.Hour},
			Needs:   Needs{Bridge: true, HostPorts: []orchestrator.HostPort{hostPort(8080, "tcp")}},
			PortHolders: func(instance string) []PortHolder {
				if instance != "i1" {
					t.Errorf("asked for the ports of %s", instance)
				}
				return holders["i1"]
			}}
	}
	up := ready("i1", "network.bridge=true")
	noBridge := ready("i1", "network.bridge=false")
	unhealthy := running("t1", "i1", "d:1", 1)
	unhealthy.Healthy, unhealthy.Health = false, orchestrator.HealthUnhealthy
	stopping := running("t1", "i1", "d:1", 1)
	stopping.Desired = orchestrator.StatusStopped
	byHand := []PortHolder{{Task: "01jhand", Ports: []orchestrator.HostPort{hostPort(8080, "tcp")}}}
	mine := []PortHolder{{Task: "t1", Ports: []orchestrator.HostPort{hostPort(8080, "tcp")}}}

	type want struct {
		state, blocked string
		current        string
		place          bool
		stops          int
		unavailable    bool
		replaceable    bool
	}
	for _, tc := range []struct {
		name    string
		target  Target
		in      InstanceView
		holders []PortHolder
		tasks   []TaskView
		want    want
	}{
		{name: "no task yet, port free: placed", target: target(false), in: up,
			want: want{state: StateStarting, place: true, unavailable: true}},
		{name: "no task yet, port taken: blocked, and not counted unavailable", target: target(false), in: up, holders: byHand,
			want: want{state: StateBlocked, blocked: "host port 8080/tcp is taken by task 01jhand"}},
		{name: "no bridge: blocked", target: target(false), in: noBridge,
			want: want{state: StateBlocked, blocked: "the task definition's network is bridge, and the instance cannot run bridge tasks (network.bridge=false)"}},
		{name: "a stopping task of the environment holds the port: the placement replaces it", target: target(false), in: up, holders: mine,
			tasks: []TaskView{stopping}, want: want{state: StateStarting, place: true, unavailable: true}},
		{name: "a rolling update of a task holding the port replaces it", target: target(true), in: up, holders: mine,
			tasks: []TaskView{running("t1", "i1", "d:1", 1)}, want: want{state: StatePending, current: "t1", replaceable: true}},
		{name: "a rolling update blocked by another task leaves the old task running", target: target(true), in: up, holders: append(mine, byHand...),
			tasks: []TaskView{running("t1", "i1", "d:1", 1)},
			want:  want{state: StateBlocked, blocked: "host port 8080/tcp is taken by task 01jhand", current: "t1"}},
		{name: "an unhealthy old task, blocked: left, unavailable", target: target(true), in: up, holders: byHand,
			tasks: []TaskView{unhealthy},
			want:  want{state: StateBlocked, blocked: "host port 8080/tcp is taken by task 01jhand", current: "t1", unavailable: true}},
		{name: "the target already runs: nothing to place, nothing blocked", target: target(false), in: noBridge, holders: byHand,
			tasks: []TaskView{running("t1", "i1", "d:2", 1)}, want: want{state: StateComplete, current: "t1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			holders["i1"] = tc.holders
			tasks := make([]*TaskView, len(tc.tasks))
			for i := range tc.tasks {
				tasks[i] = &tc.tasks[i]
			}
			in := tc.in
			d := DecideInstance(tc.target, "i1", &in, true, tasks, t0)
			current := ""
			if d.Instance.Current != nil {
				current = d.Instance.Current.Name
			}
			got := want{state: d.Instance.State, blocked: d.Instance.Blocked, current: current, place: d.Place != nil, stops: len(d.Stops), unavailable: d.Unavailable, replaceable: d.Replaceable}
			if got != tc.want {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// A plan places around a blocked instance, the rollout goes on elsewhere,
// and the deployment lists the instance, with why, outside its total.
func TestPlanAndProgressWithABlockedInstance(t *testing.T) {
	target := Target{TaskDefinition: "d:2", Group: groupOf(t), Replace: true,
		Rollout: Rollout{MinHealthyPercent: 50, HealthyDeadline: time.Minute, ProgressDeadline: time.Hour},
		Needs:   Needs{Bridge: true, HostPorts: []orchestrator.HostPort{hostPort(8080, "tcp")}},
		PortHolders: func(instance string) []PortHolder {
			if instance == "i2" {
				return []PortHolder{{Task: "01jhand", Ports: []orchestrator.HostPort{hostPort(8080, "tcp")}}}
			}
			return nil
		}}
	instances := []InstanceView{
		ready("i1", "network.bridge=true"), ready("i2", "network.bridge=true"),
		ready("i3", "network.bridge=false"), ready("i4", "network.bridge=true"),
	}
	tasks := []TaskView{running("t4", "i4", "d:1", 1)}
	p := ComputePlan(target, instances, tasks, t0)
	if fmt.Sprint(p.Places) != "[{i1 1 false } {i4 2 false t4}]" || p.Unavailable != 1 {
		t.Fatalf("places %v, unavailable %d; want i1 placed, i4 replaced, only i1 unavailable", p.Places, p.Unavailable)
	}
	var blocked []string
	for _, b := range BlockedOf(p) {
		blocked = append(blocked, b.GetInstance()+": "+b.GetReason())
	}
	if want := "i2: host port 8080/tcp is taken by task 01jhand|i3: the task definition's network is bridge, and the instance cannot run bridge tasks (network.bridge=false)"; strings.Join(blocked, "|") != want {
		t.Fatalf("blocked %q", blocked)
	}

	d := DeploymentView{ID: "dep", Type: DeploymentUser, TaskDef: "d:2", StartTime: t0}
	pr := UserProgress(d, p, target.Rollout, t0)
	if pr.Total != 2 || pr.Blocked != 2 || pr.Status != "" {
		t.Fatalf("progress %+v, want 2 to bring over, 2 blocked, going on", pr)
	}
	var listed []string
	for _, in := range pr.Instances {
		listed = append(listed, in.GetInstance()+" "+in.GetState())
	}
	if fmt.Sprint(listed) != "[i1 starting i2 blocked i3 blocked i4 starting]" {
		t.Fatalf("instances %v", listed)
	}

	// Once i1 and i4 run the new definition, healthy, the deployment
	// completes and says what it left out.
	done := []TaskView{running("n1", "i1", "d:2", 1), running("n4", "i4", "d:2", 2)}
	done[0].Deployment, done[1].Deployment = "dep", "dep"
	p = ComputePlan(target, instances, done, t0)
	pr = UserProgress(d, p, target.Rollout, t0)
	want := "2/2 complete; 2 instances blocked (i2: host port 8080/tcp is taken by task 01jhand; i3: the task definition's network is bridge, and the instance cannot run bridge tasks (network.bridge=false))"
	if pr.Status != StatusCompleted || pr.Reason != want {
		t.Fatalf("status %q reason %q\nwant completed, %q", pr.Status, pr.Reason, want)
	}
	// With every instance blocked, nothing was placed, and it says why.
	pr = UserProgress(d, ComputePlan(target, instances[1:3], nil, t0), target.Rollout, t0)
	if pr.Status != StatusCompleted || !strings.HasPrefix(pr.Reason, "nothing placed: 2 instances blocked (i2: host port 8080/tcp is taken") {
		t.Fatalf("status %q reason %q", pr.Status, pr.Reason)
	}
}

// TestPlanNeverPlacesWhereBlocked: whatever the fleet, the tasks and who
// holds which host ports, a plan never places (nor replaces, which stops
// the old task) where the placement would be blocked, and every
// instance it leaves blocked says why.
func TestPlanNeverPlacesWhereBlocked(t *testing.T) {
	ports := []orchestrator.HostPort{hostPort(80, "tcp"), hostPort(80, "udp"), hostPort(8080, "tcp")}
	rapid.Check(t, func(rt *rapid.T) {
		var needs Needs
		needs.Bridge = rapid.Bool().Draw(rt, "bridge")
		for _, p := range ports {
			if rapid.Bool().Draw(rt, "wants "+p.String()) {
				needs.HostPorts = append(needs.HostPorts, p)
			}
		}
		n := rapid.IntRange(1, 8).Draw(rt, "instances")
		var instances []InstanceView
		var tasks []TaskView
		holders := map[string][]PortHolder{}
		for i := range n {
			name := fmt.Sprintf("i%d", i)
			in := ready(name)
			switch rapid.IntRange(0, 2).Draw(rt, "bridge attribute") {
			case 0:
				in.Attributes[orchestrator.AttrNetworkBridge] = "true"
			case 1:
				in.Attributes[orchestrator.AttrNetworkBridge] = "false"
			}
			instances = append(instances, in)
			// The environment's own task there, if any, holds the ports
			// its definition publishes, as the cache would say.
			switch rapid.IntRange(0, 3).Draw(rt, "own task") {
			case 1:
				tasks = append(tasks, running("own-"+name, name, "d:1", 1))
			case 2:
				tv := running("own-"+name, name, "d:1", 1)
				tv.Healthy = false
				tasks = append(tasks, tv)
			case 3:
				tv := running("own-"+name, name, "d:1", 1)
				tv.Desired = orchestrator.StatusStopped
				tasks = append(tasks, tv)
			}
			if len(tasks) > 0 && tasks[len(tasks)-1].Instance == name && rapid.Bool().Draw(rt, "own holds") {
				holders[name] = append(holders[name], PortHolder{Task: "own-" + name, Ports: needs.HostPorts})
			}
			if rapid.Bool().Draw(rt, "other holder") {
				p := ports[rapid.IntRange(0, len(ports)-1).Draw(rt, "other port")]
				holders[name] = append(holders[name], PortHolder{Task: "other-" + name, Ports: []orchestrator.HostPort{p}})
			}
		}
		target := Target{TaskDefinition: "d:2", Group: groupOf(t), Replace: rapid.Bool().Draw(rt, "replace"),
			Rollout: Rollout{MinHealthyPercent: rapid.IntRange(0, 100).Draw(rt, "mhp"), HealthyDeadline: time.Minute, ProgressDeadline: time.Hour},
			Needs:   needs, PortHolders: func(instance string) []PortHolder { return holders[instance] }}
		p := ComputePlan(target, instances, tasks, t0)
		attrs := map[string]map[string]string{}
		for _, in := range instances {
			attrs[in.Name] = in.Attributes
		}
		for _, pl := range p.Places {
			if why := Blocked(needs, attrs[pl.Instance], holders[pl.Instance], pl.Replaces); why != "" {
				rt.Fatalf("placed on %s (replacing %q), which is blocked: %s", pl.Instance, pl.Replaces, why)
			}
		}
		for _, ip := range p.Instances {
			if (ip.State == StateBlocked) != (ip.Blocked != "") {
				rt.Fatalf("instance %s: state %q, blocked %q", ip.Instance, ip.State, ip.Blocked)
			}
			if ip.State != StateBlocked {
				continue
			}
			for _, s := range p.Stops {
				if s.Reason == ReasonReplaced && ip.Current != nil && s.Task == ip.Current.Name {
					rt.Fatalf("blocked instance %s has its task %s stopped for a replacement", ip.Instance, s.Task)
				}
			}
		}
	})
}
