package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	pbagent "trellis.dev/trellis/api/agent/v1"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/tasks"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
)

// registered waits until the agent's Instance carries its session.
func registered(t *testing.T, srv *testServer, a *running) *pborch.Instance {
	t.Helper()
	var in *pborch.Instance
	eventually(t, "the agent registers", func() bool {
		_, in = srv.instance(t, a.cfg.Name)
		return in != nil && in.GetSession() == a.Session()
	})
	return in
}

func TestRegistrationKeepsOperatorAttributesAndDrain(t *testing.T) {
	// A short TTL: the agent heartbeats every ~0.6 s.
	srv := startServerTTL(t, 2*time.Second)
	// While the agent was away an operator drained the instance and set
	// attributes; a driver it had then is gone now.
	srv.write(t, orchestrator.InstanceID("i-1"), &pborch.Instance{
		Cluster: "default", Status: orchestrator.InstanceDraining, Drain: true,
		Attributes: map[string]string{"rack": "r1", "zone": "old", "os": "plan9", "driver.docker": "27.0"},
	})
	cfg := config(t, "i-1", newProcTable(t), srv)
	cfg.Cluster = "prod"
	cfg.Attributes = map[string]string{"zone": "a"}
	a := startAgent(t, cfg)
	in := registered(t, srv, a)

	if in.GetStatus() != orchestrator.InstanceDraining || !in.GetDrain() {
		t.Errorf("status %q drain %v; want the operator's drain kept (draining)", in.GetStatus(), in.GetDrain())
	}
	if in.GetCluster() != "prod" || in.GetAddress() != a.Address() || in.GetRegisteredAt() == nil {
		t.Errorf("cluster %q address %q registered_at %v; want prod, %s, set", in.GetCluster(), in.GetAddress(), in.GetRegisteredAt(), a.Address())
	}
	attrs := in.GetAttributes()
	want := map[string]string{
		"rack": "r1", "zone": "a", "os": runtime.GOOS, "arch": runtime.GOARCH,
		"cpu.count": strconv.Itoa(runtime.NumCPU()), "driver.exec": "test 1.0",
	}
	for k, v := range want {
		if attrs[k] != v {
			t.Errorf("attribute %s = %q, want %q", k, attrs[k], v)
		}
	}
	for _, k := range []string{"hostname", "memory.bytes", "kernel"} {
		if attrs[k] == "" {
			t.Errorf("built-in attribute %s is missing", k)
		}
	}
	if _, ok := attrs["driver.docker"]; ok {
		t.Errorf("driver.docker is still there; the agent has no such driver now")
	}
	if in.GetResources().GetCpuMillis() != int64(runtime.NumCPU())*1000 || len(in.GetDrivers()) != 1 {
		t.Errorf("resources %v drivers %v", in.GetResources(), in.GetDrivers())
	}
	// A generic write cannot take over the agent's proof: a session in
	// the data is refused, naming the field and Register, and nothing
	// changes.
	res, _ := srv.instance(t, "i-1")
	forged := &pborch.Instance{Cluster: "prod", Drain: true, Session: "01FORGED"}
	data, _ := anypb.New(forged)
	_, err := srv.res.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: res.GetId(), Version: res.GetVersion(), Data: data}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "data.session") || !strings.Contains(err.Error(), "AgentService.Register") {
		t.Errorf("a generic write of a session: %v; want InvalidArgument naming data.session and Register", err)
	}
	if _, in := srv.instance(t, "i-1"); in.GetSession() != a.Session() {
		t.Errorf("session %q after a forged write, want the agent's %q", in.GetSession(), a.Session())
	}
	// The first heartbeat comes with the registration; the agent goes on
	// heartbeating, every third of the TTL the server gave it.
	eventually(t, "the server takes the agent's heartbeats", func() bool { return srv.acceptedHeartbeats(t) >= 3 })
}

// runningTask starts a server and the agent of instance i-1, and places
// task t1 there, running.
func runningTask(t *testing.T) (*testServer, *procTable, *running) {
	t.Helper()
	srv := startServer(t)
	pt := newProcTable(t)
	a := startAgent(t, config(t, "i-1", pt, srv))
	registered(t, srv, a)
	srv.registerDefinition(t, "default", shDefinition("sleeper", "exec sleep 1000"))
	srv.place(t, "default", "t1", "sleeper:1", "i-1")
	srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))
	return srv, pt, a
}

// forgetSession makes the store name another session for instance i-1, as
// when the servers dropped the agent's: its next heartbeat is refused.
func (ts *testServer) forgetSession(t *testing.T) {
	t.Helper()
	_, in := ts.instance(t, "i-1")
	if _, err := ts.agents.Register(context.Background(), &pbagent.RegisterRequest{
		Instance: "i-1", Cluster: in.GetCluster(),
		Registration: &pborch.AgentRegistration{Session: "01STALE", Address: in.GetAddress(), Attributes: in.GetAttributes()},
	}); err != nil {
		t.Fatal(err)
	}
}

func TestReRegistersWhenTheServersForgetItsSession(t *testing.T) {
	srv, pt, a := runningTask(t)
	first := a.Session()
	before, _ := srv.instance(t, "i-1")

	// The next heartbeat is refused: the agent registers a new session
	// and reports its task with it.
	srv.forgetSession(t)
	eventually(t, "a new session is registered", func() bool {
		_, in := srv.instance(t, "i-1")
		s := a.Session()
		return s != first && in.GetSession() == s
	})
	// A registration is the agent's status key: the spec's generation
	// stays.
	if after, _ := srv.instance(t, "i-1"); after.GetGeneration() != before.GetGeneration() {
		t.Errorf("generation %d after registering again, was %d", after.GetGeneration(), before.GetGeneration())
	}
	srv.waitTask(t, "default", "t1", "is reported with the new session", func(tk *storedTask) bool {
		return tk.GetSession() == a.Session() && tk.GetLastStatus() == orchestrator.StatusRunning
	})
	if n := pt.starts.Load(); n != 1 {
		t.Errorf("the task was started %d times, want once", n)
	}
}

func TestAssignmentsArriveByWatch(t *testing.T) {
	srv := startServer(t)
	counts := newRPCs()
	cfg := config(t, "i-1", newProcTable(t), srv)
	cfg.DialOptions = counts.dialOptions()
	a := startAgent(t, cfg)
	registered(t, srv, a)

	srv.registerDefinition(t, "default", shDefinition("sleeper", "exec sleep 1000"))
	reads := counts.count("Read")
	srv.place(t, "default", "t1", "sleeper:1", "i-1")
	srv.place(t, "default", "elsewhere", "sleeper:1", "i-2")
	tk := srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))
	if n := counts.count("Read") - reads; n != 0 {
		t.Errorf("the agent read %d times to start the task; want its definition from the task stream", n)
	}
	c := tk.GetContainers()
	if len(c) != 1 || c[0].GetStatus() != orchestrator.StatusRunning || c[0].GetRuntimeId() == "" || c[0].GetStartedAt() == nil {
		t.Errorf("containers %v; want app running with a pid", c)
	}
	if tk.GetSession() != a.Session() || tk.GetStartedAt() == nil || tk.GetReportedAt() == nil || tk.GetDesiredStatus() != orchestrator.StatusRunning {
		t.Errorf("task %v", tk)
	}
	// The agent leaves another instance's task alone. (The servers mark it
	// LOST, since instance i-2 does not exist; that is not this agent's.)
	if _, other := srv.task(t, "default", "elsewhere"); other.GetSession() == a.Session() || len(other.GetContainers()) != 0 {
		t.Errorf("a task of another instance was touched by this agent: %v", other)
	}
	if n, w, wt := counts.count("List"), counts.count("WatchList "+ids.TypeString(orchestrator.TaskType)), counts.count("WatchTasks"); n != 0 || w != 0 || wt != 1 {
		t.Errorf("List called %d times, WatchList of the tasks %d, WatchTasks %d; want assignments from one per-instance watch", n, w, wt)
	}
	// An agent with no mesh task opens none of the proxy snapshots' watches
	// (declared on demand): a fleet's agents cost the servers nothing for it.
	if n := counts.count("WatchList " + ids.TypeString(catalog.ServiceInstanceType)); n != 0 {
		t.Errorf("an agent without a mesh task watched the service instances %d times, want 0", n)
	}

	// Desired STOPPED stops it.
	srv.editTask(t, "default", "t1", func(tk *pborch.Task) { tk.DesiredStatus = orchestrator.StatusStopped })
	tk = srv.waitTask(t, "default", "t1", "stops", lastStatus(orchestrator.StatusStopped))
	if tk.GetStopReason() != tasks.ReasonDesiredStopped || tk.GetStoppedAt() == nil {
		t.Errorf("stop reason %q stopped_at %v", tk.GetStopReason(), tk.GetStoppedAt())
	}
	if c := tk.GetContainers(); c[0].GetStatus() != orchestrator.StatusStopped || c[0].GetExitCode() != 128+int32(syscall.SIGTERM) {
		t.Errorf("container %v; want stopped by SIGTERM", c[0])
	}
	eventually(t, "the task's local state is removed", func() bool { return len(records(t, cfg.DataDir)) == 0 })
}

func records(t testing.TB, dataDir string) []string {
	m, err := filepath.Glob(filepath.Join(dataDir, "tasks", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMissingDefinitionStopsTheTask(t *testing.T) {
	srv := startServer(t)
	a := startAgent(t, config(t, "i-1", newProcTable(t), srv))
	registered(t, srv, a)
	srv.place(t, "default", "t1", "nothing:4", "i-1")
	tk := srv.waitTask(t, "default", "t1", "stops", lastStatus(orchestrator.StatusStopped))
	if want := "cannot start: task definition nothing:4 not found in namespace default"; tk.GetStopReason() != want {
		t.Errorf("stop reason %q, want %q", tk.GetStopReason(), want)
	}
}

func TestReportsAreBatchedAndMergedOnConflict(t *testing.T) {
	srv := startServer(t)
	counts := newRPCs()
	cfg := config(t, "i-1", newProcTable(t), srv)
	cfg.DialOptions = counts.dialOptions()
	cfg.RPCTimeout = waitLimit * 2
	a := startAgent(t, cfg)
	registered(t, srv, a)
	srv.registerDefinition(t, "default", shDefinition("sleeper", "exec sleep 1000"))

	// Hold the first report while all ten tasks start and report.
	counts.hold()
	const n = 10
	var batch []*pbresource.Resource
	for i := range n {
		data, _ := anypb.New(&pborch.Task{TaskDefinition: "sleeper:1", Instance: "i-1", StartedBy: "test"})
		batch = append(batch, &pbresource.Resource{Id: orchestrator.TaskID("default", "t"+strconv.Itoa(i)), Data: data})
	}
	if _, err := srv.res.WriteBatch(context.Background(), &pbresource.WriteBatchRequest{Resources: batch}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first report is held", func() bool { return counts.held.Load() == 1 })
	eventually(t, "every task runs on the agent", func() bool {
		return a.countTasks(func(e tasks.TaskView) bool { return e.Status == orchestrator.StatusRunning }) == n
	})

	// Meanwhile someone labels every task: the held batch is stale now.
	for i := range n {
		name := "t" + strconv.Itoa(i)
		res, _ := srv.task(t, "default", name)
		res.Metadata = map[string]string{"team": "blue"}
		if _, err := srv.res.Write(context.Background(), &pbresource.WriteRequest{Resource: res}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the agent has seen the labels", func() bool {
		return a.countTasks(func(e tasks.TaskView) bool { return e.Metadata["team"] == "blue" }) == n
	})
	counts.release()

	for i := range n {
		name := "t" + strconv.Itoa(i)
		srv.waitTask(t, "default", name, "runs", lastStatus(orchestrator.StatusRunning))
		if res, _ := srv.task(t, "default", name); res.GetMetadata()["team"] != "blue" {
			t.Errorf("%s lost its label: %v", name, res.GetMetadata())
		}
	}
	// Every member of the held batch failed on the conflict; its tasks were
	// read again and every report went in one more batch. No task was
	// written alone.
	if got := counts.count("WriteStatuses"); got != 2 {
		t.Errorf("%d WriteStatuses calls for %d tasks starting, want 2 (the held one, then all in one)", got, n)
	}
	if got := counts.count("WriteStatus"); got != 0 {
		t.Errorf("%d WriteStatus calls, want none (reports go in batches)", got)
	}
	if got := counts.count("Register"); got != 1 {
		t.Errorf("%d Register calls, want 1 (the registration)", got)
	}
	if got := counts.count("Write"); got != 0 {
		t.Errorf("%d Write calls, want none (the registration is Register)", got)
	}
}

func (a *Agent) countTasks(cond func(tasks.TaskView) bool) int {
	n := 0
	for _, e := range a.tasks.Tasks() {
		if cond(e) {
			n++
		}
	}
	return n
}

func TestKilledAgentResumesItsTasks(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	cfg := config(t, "i-1", pt, srv)
	a1 := startAgent(t, cfg)
	registered(t, srv, a1)
	srv.registerDefinition(t, "default", shDefinition("sleeper", "exec sleep 1000"))
	srv.place(t, "default", "t1", "sleeper:1", "i-1")
	before := srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))
	oldAddr := a1.HTTPAddr()

	a1.kill(t)
	pid, _ := strconv.Atoi(before.GetContainers()[0].GetRuntimeId())
	if p := pt.find(pid); p == nil || syscall.Kill(pid, 0) != nil {
		t.Fatalf("process %d is gone after the agent was killed", pid)
	}

	a2 := startAgent(t, cfg)
	after := srv.waitTask(t, "default", "t1", "is reported by the new agent", func(tk *storedTask) bool {
		return tk.GetSession() == a2.Session() && tk.GetLastStatus() == orchestrator.StatusRunning
	})
	if pt.starts.Load() != 1 || pt.resume.Load() != 1 {
		t.Errorf("runs from scratch %d, resumed %d; want the task resumed, not started again", pt.starts.Load(), pt.resume.Load())
	}
	if !proto.Equal(after.GetStartedAt(), before.GetStartedAt()) || after.GetContainers()[0].GetRuntimeId() != before.GetContainers()[0].GetRuntimeId() {
		t.Errorf("after the restart started_at %v pid %s; before %v %s", after.GetStartedAt(), after.GetContainers()[0].GetRuntimeId(), before.GetStartedAt(), before.GetContainers()[0].GetRuntimeId())
	}
	if a2.HTTPAddr() != oldAddr {
		t.Errorf("local API moved from %s to %s; the task's metadata URI would break", oldAddr, a2.HTTPAddr())
	}
	// The resumed task still answers to its desired status.
	srv.editTask(t, "default", "t1", func(tk *pborch.Task) { tk.DesiredStatus = orchestrator.StatusStopped })
	tk := srv.waitTask(t, "default", "t1", "stops", lastStatus(orchestrator.StatusStopped))
	if tk.GetContainers()[0].GetExitCode() != 128+int32(syscall.SIGTERM) {
		t.Errorf("container %v; want stopped by SIGTERM", tk.GetContainers()[0])
	}
}

func TestKilledAgentLosesNoReport(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	counts := newRPCs()
	cfg := config(t, "i-1", pt, srv)
	cfg.DialOptions = counts.dialOptions()
	a1 := startAgent(t, cfg)
	registered(t, srv, a1)
	srv.registerDefinition(t, "default", shDefinition("once", `while [ ! -e go ]; do sleep 0.01; done; exit 3`))
	res := srv.place(t, "default", "t1", "once:1", "i-1")
	srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))

	// The app exits; its report is held and the agent killed before it
	// reaches the store.
	counts.hold()
	uid := res.GetId().GetUid()
	if err := os.WriteFile(filepath.Join(tasks.TaskDir(cfg.DataDir, uid), "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the stop is saved locally", func() bool {
		b, err := os.ReadFile(tasks.RecordPath(cfg.DataDir, uid))
		var r struct {
			Done bool `json:"done"`
		}
		return err == nil && json.Unmarshal(b, &r) == nil && r.Done
	})
	eventually(t, "a report is held", func() bool { return counts.held.Load() == 1 })
	a1.kill(t)
	counts.release()
	if _, tk := srv.task(t, "default", "t1"); tk.GetLastStatus() != orchestrator.StatusRunning {
		t.Fatalf("the store says %s; the test needs the report not to have arrived", tk.GetLastStatus())
	}

	cfg.DialOptions = nil
	startAgent(t, cfg)
	tk := srv.waitTask(t, "default", "t1", "is reported stopped", lastStatus(orchestrator.StatusStopped))
	if tk.GetStopReason() != "essential container app exited with code 3" || tk.GetContainers()[0].GetExitCode() != 3 {
		t.Errorf("stop reason %q container %v", tk.GetStopReason(), tk.GetContainers()[0])
	}
	if pt.starts.Load() != 1 || pt.resume.Load() != 0 {
		t.Errorf("runs %d, resumes %d; a stopped task is neither", pt.starts.Load(), pt.resume.Load())
	}
	eventually(t, "the local state is removed", func() bool { return len(records(t, cfg.DataDir)) == 0 })
}

func TestLostTasks(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	cfg := config(t, "i-1", pt, srv)
	a := startAgent(t, cfg)
	registered(t, srv, a)
	srv.registerDefinition(t, "default", shDefinition("sleeper", "exec sleep 1000"))
	srv.place(t, "default", "t1", "sleeper:1", "i-1")
	srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))

	// The servers marked it lost; it still runs here: re-adopted.
	srv.markLost(t, "default", "t1", "instance down")
	tk := srv.waitTask(t, "default", "t1", "is re-adopted", lastStatus(orchestrator.StatusRunning))
	if tk.GetStopReason() != "" || tk.GetSession() != a.Session() {
		t.Errorf("re-adopted task: stop reason %q session %q", tk.GetStopReason(), tk.GetSession())
	}

	// A lost task this agent does not run is reported stopped, not run:
	// one placed and marked lost while the agent was away (a task and its
	// status are two writes, which the agent must not see apart).
	a.kill(t)
	srv.write(t, orchestrator.TaskID("default", "t2"), &pborch.Task{TaskDefinition: "sleeper:1", Instance: "i-1", StartedBy: "test"})
	srv.markLost(t, "default", "t2", "instance down")
	startAgent(t, cfg)
	tk = srv.waitTask(t, "default", "t2", "is closed", lastStatus(orchestrator.StatusStopped))
	if !strings.HasPrefix(tk.GetStopReason(), "lost: ") {
		t.Errorf("stop reason %q", tk.GetStopReason())
	}

	// Lost and no longer wanted: stopped.
	srv.markLost(t, "default", "t1", "instance down")
	srv.editTask(t, "default", "t1", func(tk *pborch.Task) { tk.DesiredStatus = orchestrator.StatusStopped })
	tk = srv.waitTask(t, "default", "t1", "stops", lastStatus(orchestrator.StatusStopped))
	if tk.GetContainers()[0].GetExitCode() != 128+int32(syscall.SIGTERM) {
		t.Errorf("container %v; want stopped by SIGTERM", tk.GetContainers()[0])
	}
	if n := pt.starts.Load(); n != 1 {
		t.Errorf("%d tasks started, want 1", n)
	}
}

// An instance that flaps is marked down again and again, its tasks LOST
// each time, and its agent re-reports them until its repairs are used
// up. Once it registers a new session, it reports them again.
func TestLostTasksAreReadoptedAfterRepairsRanOut(t *testing.T) {
	srv, pt, a := runningTask(t)
	lose := func() {
		srv.markLost(t, "default", "t1", "instance down")
	}
	for range tasks.MaxRepairs {
		lose()
		srv.waitTask(t, "default", "t1", "is re-adopted", lastStatus(orchestrator.StatusRunning))
	}
	lose()
	eventually(t, "the agent has seen the task lost once more", func() bool {
		return a.countTasks(func(e tasks.TaskView) bool { return e.StoredStatus == orchestrator.StatusLost }) == 1
	})

	// The servers forget the session, as when they marked the instance
	// down: the agent registers a new one and re-adopts its task.
	first := a.Session()
	srv.forgetSession(t)
	eventually(t, "a new session is registered", func() bool { return a.Session() != first })
	srv.waitTask(t, "default", "t1", "is re-adopted with the new session", func(tk *storedTask) bool {
		return tk.GetSession() == a.Session() && tk.GetLastStatus() == orchestrator.StatusRunning
	})
	if n := pt.starts.Load(); n != 1 {
		t.Errorf("the task was started %d times, want once", n)
	}
}

func TestDeletedTaskIsStopped(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	cfg := config(t, "i-1", pt, srv)
	a := startAgent(t, cfg)
	registered(t, srv, a)
	srv.registerDefinition(t, "default", shDefinition("sleeper", "exec sleep 1000"))
	srv.place(t, "default", "t1", "sleeper:1", "i-1")
	tk := srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))
	pid, _ := strconv.Atoi(tk.GetContainers()[0].GetRuntimeId())
	if _, err := srv.res.Delete(context.Background(), &pbresource.DeleteRequest{Id: orchestrator.TaskID("default", "t1")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the process is stopped", func() bool {
		select {
		case <-pt.find(pid).done:
			return true
		default:
			return false
		}
	})
	eventually(t, "the local state is removed", func() bool { return len(records(t, cfg.DataDir)) == 0 })
	if res, _ := srv.task(t, "default", "t1"); res != nil {
		t.Errorf("the deleted task was written again: %v", res)
	}
}

func TestMetadataEndpoint(t *testing.T) {
	srv := startServer(t)
	cfg := config(t, "i-1", newProcTable(t), srv)
	a := startAgent(t, cfg)
	registered(t, srv, a)
	srv.registerDefinition(t, "default", shDefinition("meta", `echo "$TRELLIS_TASK_METADATA_URI" > uri; exec sleep 1000`))
	res := srv.place(t, "default", "t1", "meta:1", "i-1")
	srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))

	// The task reads the URI from its environment.
	uri := readFileEventually(t, filepath.Join(tasks.TaskDir(cfg.DataDir, res.GetId().GetUid()), "uri"))
	if !strings.HasPrefix(uri, "http://"+a.HTTPAddr()+"/v1/metadata/") {
		t.Fatalf("TRELLIS_TASK_METADATA_URI = %q", uri)
	}
	md, err := ReadMetadata(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	if md.Name != "t1" || md.Namespace != "default" || md.UID != res.GetId().GetUid() || md.TaskDefinition != "meta:1" ||
		md.Instance != "i-1" || md.DesiredStatus != "RUNNING" || md.LastStatus != "RUNNING" {
		t.Errorf("metadata %+v", md)
	}
	if len(md.Containers) != 1 || md.Containers[0].Name != "app" || md.Containers[0].Status != "RUNNING" || md.Containers[0].ExitCode != nil {
		t.Errorf("containers %+v", md.Containers)
	}
	if code, _ := httpGet(t, uri+"/task"); code != http.StatusOK {
		t.Errorf("%s/task answered %d", uri, code)
	}
	if code, body := httpGet(t, "http://"+a.HTTPAddr()+"/v1/metadata/not-a-token"); code != http.StatusNotFound || !strings.Contains(body, "not_found") {
		t.Errorf("a wrong token: %d %s", code, body)
	}

	// What seed 000's proxy waits for: the app's exit, seen through the
	// endpoint (it still answers once the task has stopped).
	srv.editTask(t, "default", "t1", func(tk *pborch.Task) { tk.DesiredStatus = orchestrator.StatusStopped })
	srv.waitTask(t, "default", "t1", "stops", lastStatus(orchestrator.StatusStopped))
	md, err = ReadMetadata(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	if md.LastStatus != "STOPPED" || md.DesiredStatus != "STOPPED" || md.Containers[0].ExitCode == nil || *md.Containers[0].ExitCode != 143 {
		t.Errorf("after the stop: %+v %+v", md, md.Containers)
	}
}

func TestLogsEndpoint(t *testing.T) {
	srv := startServer(t)
	a := startAgent(t, config(t, "i-1", newProcTable(t), srv))
	registered(t, srv, a)
	srv.registerDefinition(t, "default", shDefinition("talker", `echo hello; echo oops >&2; exec sleep 1000`))
	srv.place(t, "default", "t1", "talker:1", "i-1")
	srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))

	base := "/v1/tasks/default/t1/logs/app"
	eventually(t, "stdout has the line", func() bool { code, body := controlGet(t, a.Agent, base); return code == 200 && body == "hello\n" })
	// The shell writes stderr's line after stdout's: wait for it too.
	eventually(t, "stderr has the line", func() bool {
		code, body := controlGet(t, a.Agent, base+"?stream=stderr")
		return code == 200 && body == "oops\n"
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rc, err := OpenLogs(ctx, Control{Socket: a.ControlSocket()}, "default", "t1", "app", driver.Stdout, true)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(rc).ReadString('\n')
	if err != nil || line != "hello\n" {
		t.Errorf("following: %q %v", line, err)
	}
	cancel()
	rc.Close()

	for _, c := range []struct {
		path string
		code int
	}{
		{"/v1/tasks/default/t1/logs/db", http.StatusNotFound},
		{"/v1/tasks/default/nope/logs/app", http.StatusNotFound},
		{"/v1/tasks/default/t1/logs/app?stream=stdin", http.StatusBadRequest},
	} {
		if code, body := controlGet(t, a.Agent, c.path); code != c.code {
			t.Errorf("%s: %d %s, want %d", c.path, code, body, c.code)
		}
	}
}

func TestLeave(t *testing.T) {
	srv := startServer(t)
	cfg := config(t, "i-1", newProcTable(t), srv)
	a := startAgent(t, cfg)
	registered(t, srv, a)
	srv.registerDefinition(t, "default", shDefinition("sleeper", "exec sleep 1000"))
	srv.place(t, "default", "t1", "sleeper:1", "i-1")
	srv.place(t, "default", "t2", "sleeper:1", "i-1")
	srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))
	srv.waitTask(t, "default", "t2", "runs", lastStatus(orchestrator.StatusRunning))

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := RequestLeave(ctx, Control{Socket: a.ControlSocket()}); err != nil {
		_, self := controlGet(t, a.Agent, "/v1/agent/self")
		t.Fatalf("leave: %v; the agent says %s", err, self)
	}
	for _, name := range []string{"t1", "t2"} {
		tk := srv.waitTask(t, "default", name, "stops", lastStatus(orchestrator.StatusStopped))
		if tk.GetStopReason() != tasks.ReasonLeaving {
			t.Errorf("%s: stop reason %q", name, tk.GetStopReason())
		}
	}
	if _, in := srv.instance(t, "i-1"); in.GetStatus() != orchestrator.InstanceLeft {
		t.Errorf("instance status %q, want left", in.GetStatus())
	}
	select {
	case err := <-a.done:
		if err != nil {
			t.Errorf("Start = %v", err)
		}
		close(a.done)
	case <-waitTimeout():
		t.Fatal("Start did not return after the leave")
	}
	if len(records(t, cfg.DataDir)) != 0 {
		t.Errorf("local state left behind: %v", records(t, cfg.DataDir))
	}
}

func TestAdmitRefusesASecondCopy(t *testing.T) {
	srv := startServer(t)
	cfg := config(t, "i-1", newProcTable(t), srv)
	cfg.Admit = func(c Assignment, live []Assignment) error {
		for _, l := range live {
			if l.Metadata["env"] == c.Metadata["env"] {
				return errSecondCopy(l.ID.GetName())
			}
		}
		return nil
	}
	a := startAgent(t, cfg)
	registered(t, srv, a)
	srv.registerDefinition(t, "default", shDefinition("sleeper", "exec sleep 1000"))
	place := func(name, env string) {
		data, _ := anypb.New(&pborch.Task{TaskDefinition: "sleeper:1", Instance: "i-1", StartedBy: "test"})
		_, err := srv.res.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{
			Id: orchestrator.TaskID("default", name), Data: data, Metadata: map[string]string{"env": env},
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	place("web-1", "web")
	srv.waitTask(t, "default", "web-1", "runs", lastStatus(orchestrator.StatusRunning))
	place("web-2", "web")
	place("db-1", "db")
	tk := srv.waitTask(t, "default", "web-2", "is refused", lastStatus(orchestrator.StatusStopped))
	if !strings.Contains(tk.GetStopReason(), "refused by the agent of instance i-1: a copy runs already: web-1") {
		t.Errorf("stop reason %q", tk.GetStopReason())
	}
	srv.waitTask(t, "default", "db-1", "runs", lastStatus(orchestrator.StatusRunning))
}

type errSecondCopy string

func (e errSecondCopy) Error() string { return "a copy runs already: " + string(e) }

// A task deleted while its agent was away is not in the agent's first
// listing: the agent stops it (without writing it back).
func TestTaskDeletedWhileTheAgentWasAway(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	cfg := config(t, "i-1", pt, srv)
	a1 := startAgent(t, cfg)
	registered(t, srv, a1)
	srv.registerDefinition(t, "default", shDefinition("sleeper", "exec sleep 1000"))
	srv.place(t, "default", "t1", "sleeper:1", "i-1")
	tk := srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))
	pid, _ := strconv.Atoi(tk.GetContainers()[0].GetRuntimeId())
	a1.kill(t)
	if _, err := srv.res.Delete(context.Background(), &pbresource.DeleteRequest{Id: orchestrator.TaskID("default", "t1")}); err != nil {
		t.Fatal(err)
	}

	startAgent(t, cfg)
	eventually(t, "the process is stopped", func() bool {
		select {
		case <-pt.find(pid).done:
			return true
		default:
			return false
		}
	})
	eventually(t, "the local state is removed", func() bool { return len(records(t, cfg.DataDir)) == 0 })
	if res, _ := srv.task(t, "default", "t1"); res != nil {
		t.Errorf("the deleted task was written again: %v", res)
	}
	if pt.resume.Load() != 1 {
		t.Errorf("resumed %d times, want 1 (then stopped)", pt.resume.Load())
	}
}

// A relative -data-dir is made absolute: the drivers are given the task's
// directories and refuse relative ones (every task failed to start).
func TestRelativeDataDirGivesTasksAbsolutePaths(t *testing.T) {
	t.Chdir(t.TempDir())
	srv := startServer(t)
	pt := newProcTable(t)
	cfg := config(t, "i-1", pt, srv)
	cfg.DataDir = "data"
	got := make(chan RunnerConfig, 1)
	cfg.NewRunner = func(rc RunnerConfig) (TaskRunner, error) {
		got <- rc
		return pt.newRunner(rc)
	}
	a := startAgent(t, cfg)
	registered(t, srv, a)
	srv.registerDefinition(t, "default", shDefinition("sleeper", "exec sleep 1000"))
	srv.place(t, "default", "t1", "sleeper:1", "i-1")
	var rc RunnerConfig
	select {
	case rc = <-got:
	case <-waitTimeout():
		t.Fatal("the agent made no runner for the task")
	}
	if !filepath.IsAbs(rc.Dir) || !filepath.IsAbs(rc.LogDir) {
		t.Errorf("task dir %q, log dir %q; want absolute paths", rc.Dir, rc.LogDir)
	}
	srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))
}

// TestViewIndexCoversOwnReports: the task stream does not echo the
// agent's own reports, yet a server must not show the agent a view older
// than them; the index the agent asks servers for covers the version its
// RUNNING report was stored at.
func TestViewIndexCoversOwnReports(t *testing.T) {
	srv, _, a := runningTask(t)
	res, _ := srv.task(t, "default", "t1")
	stored, err := strconv.ParseUint(res.GetVersion(), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the agent's view covers its report", func() bool { return a.session.ViewIndex() >= stored })
}
