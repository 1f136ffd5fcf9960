package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"trellis.dev/trellis/internal/driver"
)

func TestStartWaitExitCodes(t *testing.T) {
	t.Parallel()
	d := newTestDriver(t, Config{})
	for _, tc := range []struct {
		code   int
		signal syscall.Signal
	}{
		{0, 0},
		{7, 0},
		// The engine's convention for a signal death; see exitOf.
		{143, syscall.SIGTERM},
	} {
		t.Run(strconv.Itoa(tc.code), func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			h := start(t, ctx, d, probeSpec(t, "app", "exit", strconv.Itoa(tc.code)))
			if h.Driver != "docker" || h.ID == "" || h.StartedAt.IsZero() {
				t.Fatalf("handle: %+v", h)
			}
			exit := wait(t, ctx, d, h)
			if exit.Code != tc.code || exit.Signal != tc.signal || exit.OOMKilled {
				t.Fatalf("exit: got %+v, want code %d signal %d", exit, tc.code, tc.signal)
			}
		})
	}
}

func TestDefaultCommandSignalsAndFollowedLogs(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := newTestDriver(t, Config{})
	// No Command: the image's entrypoint and cmd ("run").
	h, stdout := startReady(t, ctx, d, probeSpec(t, "app"))

	if err := d.Signal(ctx, h, syscall.SIGUSR1); err != nil {
		t.Fatalf("Signal(SIGUSR1): %v", err)
	}
	expectLine(t, stdout, "usr1")
	if err := d.Signal(ctx, h, syscall.SIGTERM); err != nil {
		t.Fatalf("Signal(SIGTERM): %v", err)
	}
	exit := wait(t, ctx, d, h)
	if exit.Code != 3 || exit.Signal != 0 {
		t.Fatalf("exit after SIGTERM: got %+v, want code 3 from the program's handler", exit)
	}
	// The engine ends a follow when the container stops.
	rest, err := io.ReadAll(stdout)
	if err != nil || len(rest) != 0 {
		t.Fatalf("followed stdout after exit: %q, %v; want a clean end", rest, err)
	}
	if got := readLog(t, ctx, d, h, driver.Stderr); got != "got SIGTERM\n" {
		t.Fatalf("stderr: %q", got)
	}
	if got := readLog(t, ctx, d, h, driver.Stdout); got != "ready\nusr1\n" {
		t.Fatalf("stdout: %q", got)
	}
	if err := d.Signal(ctx, h, syscall.SIGTERM); err != nil {
		t.Fatalf("Signal after exit: %v, want nil", err)
	}
}

func TestFollowEndsWithContext(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := newTestDriver(t, Config{})
	h, _ := startReady(t, ctx, d, probeSpec(t, "app"))

	fctx, cancel := context.WithCancel(ctx)
	r, err := d.Logs(fctx, h, driver.Spec{}, driver.Stdout, true)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, len("ready\n"))
	if _, err := io.ReadFull(r, buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("followed stdout: %q, %v", buf, err)
	}
	cancel()
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Fatalf("after cancel: %q, %v; want a clean end", rest, err)
	}
}

func TestLogsKeepStreamsApart(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := newTestDriver(t, Config{})
	h := start(t, ctx, d, probeSpec(t, "app", "echo", "to stdout", "to stderr"))
	wait(t, ctx, d, h)
	if got := readLog(t, ctx, d, h, driver.Stdout); got != "to stdout\n" {
		t.Errorf("stdout: %q", got)
	}
	if got := readLog(t, ctx, d, h, driver.Stderr); got != "to stderr\n" {
		t.Errorf("stderr: %q", got)
	}
	if _, err := d.Logs(ctx, h, driver.Spec{}, "stdin", false); err == nil || !strings.Contains(err.Error(), "stdin") {
		t.Errorf("Logs(stdin): %v", err)
	}
}

func TestEnvAndWorkingDir(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := newTestDriver(t, Config{})
	spec := probeSpec(t, "app", "env", "GREETING", "EMPTY", "UNSET")
	spec.Env = map[string]string{"GREETING": "hello world", "EMPTY": ""}
	spec.WorkingDir = "/work/dir"
	h := start(t, ctx, d, spec)
	if exit := wait(t, ctx, d, h); exit.Code != 0 {
		t.Fatalf("exit: %+v", exit)
	}
	want := "GREETING=hello world\nEMPTY=\nUNSET=\ncwd=/work/dir\n"
	if got := readLog(t, ctx, d, h, driver.Stdout); got != want {
		t.Fatalf("stdout: got %q, want %q", got, want)
	}
}

func TestExec(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := newTestDriver(t, Config{})
	h, _ := startReady(t, ctx, d, probeSpec(t, "app"))

	code, out, err := d.Exec(ctx, h, []string{"/driverprobe", "echo", "out", "err"})
	if err != nil || code != 0 {
		t.Fatalf("Exec(echo): %d, %q, %v", code, out, err)
	}
	if s := string(out); !strings.Contains(s, "out\n") || !strings.Contains(s, "err\n") || len(s) != len("out\nerr\n") {
		t.Fatalf("Exec(echo) output: %q, want both streams", s)
	}

	if code, _, err := d.Exec(ctx, h, []string{"/driverprobe", "exit", "7"}); err != nil || code != 7 {
		t.Fatalf("Exec(exit 7): %d, %v", code, err)
	}

	code, out, err = d.Exec(ctx, h, []string{"/driverprobe", "spew", strconv.Itoa(3 * maxExecOutput)})
	if err != nil || code != 0 || len(out) != maxExecOutput {
		t.Fatalf("Exec(spew): code %d, %d bytes, %v; want 0, %d bytes", code, len(out), err, maxExecOutput)
	}

	// A program the image does not have: the engine may refuse it or run
	// it to a failure, but never report success.
	if code, out, err := d.Exec(ctx, h, []string{"/no/such/program"}); err == nil && code == 0 {
		t.Fatalf("Exec(missing program): code 0, %q", out)
	}

	if _, _, err := d.Exec(ctx, h, nil); err == nil {
		t.Fatal("Exec(no command): no error")
	}

	// A command that never ends returns when its ctx does.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	if _, _, err := d.Exec(short, h, []string{"/driverprobe", "run"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Exec past its deadline: %v", err)
	}
	if took := time.Since(began); took > 30*time.Second {
		t.Fatalf("Exec past its deadline took %v", took)
	}

	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Exec(ctx, h, []string{"/driverprobe", "exit", "0"}); !isGoneErr(err) {
		t.Fatalf("Exec in a removed container: %v, want ErrGone", err)
	}
}

func TestMissingImageIsRefused(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := newTestDriver(t, Config{})
	spec := probeSpec(t, "app")
	spec.Image = "trellis-test/absent:" + randomHex(t)
	_, err := d.Start(ctx, spec)
	if !errors.Is(err, driver.ErrImageMissing) || !strings.Contains(err.Error(), spec.Image) {
		t.Fatalf("Start with a missing image: %v; want ErrImageMissing naming %s", err, spec.Image)
	}
	if found, err := d.List(ctx); err != nil || len(found) != 0 {
		t.Fatalf("containers after a refused start: %+v, %v", found, err)
	}
}

func TestFailedStartLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := newTestDriver(t, Config{})
	spec := probeSpec(t, "broken")
	spec.Command = []string{"/no/such/program"}
	if _, err := d.Start(ctx, spec); err == nil || !strings.Contains(err.Error(), "start container") {
		t.Fatalf("Start of a missing program: %v", err)
	}
	found, err := d.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range found {
		if a.Container == "broken" {
			t.Fatalf("a failed start left container %s behind", a.Name)
		}
	}
}

func TestRecoverAndListFromAnotherDriver(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	first := newTestDriver(t, Config{})
	spec := probeSpec(t, "app")
	h, _ := startReady(t, ctx, first, spec)
	first.Close()

	// The agent restarts: a new driver under the same agent name.
	second := newTestDriver(t, Config{Agent: first.Agent()})
	other := newTestDriver(t, Config{})
	if found, err := other.List(ctx); err != nil || len(found) != 0 {
		t.Fatalf("another agent's List: %+v, %v; want nothing", found, err)
	}
	found, err := second.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 {
		t.Fatalf("List: %+v, want the one container", found)
	}
	a := found[0]
	if a.Handle.ID != h.ID || a.Handle.Driver != "docker" || !a.Handle.StartedAt.Equal(h.StartedAt) ||
		a.TaskID != spec.TaskID || a.TaskUID != spec.TaskUID || a.Container != "app" ||
		a.Image != spec.Image || a.State != "running" || !a.Running || a.Exit.Code != -1 ||
		a.Name != containerName(spec.TaskID, spec.TaskUID, spec.Container) {
		t.Fatalf("List: %+v; started %+v", a, h)
	}
	if err := second.Recover(ctx, a.Handle); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	// The agent's orphan sweep sees the same container.
	owned, err := second.Inventory(ctx)
	if err != nil || len(owned) != 1 || owned[0].Handle.ID != h.ID || owned[0].TaskUID != spec.TaskUID || owned[0].Container != "app" {
		t.Fatalf("Inventory: %+v, %v", owned, err)
	}

	if err := second.Signal(ctx, a.Handle, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if exit := wait(t, ctx, second, a.Handle); exit.Code != 3 {
		t.Fatalf("exit: %+v", exit)
	}
	// Exited: not recoverable, but Wait and List still tell how it ended.
	if err := second.Recover(ctx, h); !isGoneErr(err) {
		t.Fatalf("Recover of an exited container: %v, want ErrGone", err)
	}
	if exit := wait(t, ctx, second, h); exit.Code != 3 {
		t.Fatalf("Wait again: %+v", exit)
	}
	found, err = second.List(ctx)
	if err != nil || len(found) != 1 || found[0].Running || found[0].State != "exited" || found[0].Exit.Code != 3 {
		t.Fatalf("List after exit: %+v, %v", found, err)
	}

	for range 2 {
		if err := second.Destroy(ctx, h); err != nil {
			t.Fatalf("Destroy: %v", err)
		}
	}
	if err := second.Recover(ctx, h); !isGoneErr(err) {
		t.Fatalf("Recover of a removed container: %v, want ErrGone", err)
	}
	exit, err := second.Wait(ctx, h)
	if err != nil || !isGoneErr(exit.Err) || exit.Code != -1 {
		t.Fatalf("Wait on a removed container: %+v, %v; want Exit.Err ErrGone", exit, err)
	}
	if err := second.Signal(ctx, h, syscall.SIGTERM); !isGoneErr(err) {
		t.Fatalf("Signal to a removed container: %v, want ErrGone", err)
	}
	if _, err := second.Logs(ctx, h, spec, driver.Stdout, false); !isGoneErr(err) {
		t.Fatalf("Logs of a removed container: %v, want ErrGone", err)
	}
	if found, err := second.List(ctx); err != nil || len(found) != 0 {
		t.Fatalf("List after Destroy: %+v, %v", found, err)
	}
}

func TestWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := newTestDriver(t, Config{})
	h, _ := startReady(t, ctx, d, probeSpec(t, "app"))
	short, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := d.Wait(short, h); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with an ended ctx: %v", err)
	}
	if err := d.Recover(ctx, h); err != nil {
		t.Fatalf("the container should still run: %v", err)
	}
}

func TestDestroyRunningContainer(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := newTestDriver(t, Config{})
	h, _ := startReady(t, ctx, d, probeSpec(t, "app"))
	waited := make(chan driver.Exit, 1)
	go func() {
		exit, _ := d.Wait(ctx, h)
		waited <- exit
	}()
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	select {
	case exit := <-waited:
		if exit.Err == nil && exit.Signal != syscall.SIGKILL {
			t.Fatalf("Wait across a Destroy: %+v", exit)
		}
	case <-ctx.Done():
		t.Fatal("Wait did not return after Destroy")
	}
}

func TestStartAgainOfTheSameIncarnation(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := newTestDriver(t, Config{})

	// An exited container of the same (task uid, container) makes way.
	spec := probeSpec(t, "app", "exit", "0")
	h1 := start(t, ctx, d, spec)
	wait(t, ctx, d, h1)
	h2 := start(t, ctx, d, spec)
	if h2.ID == h1.ID {
		t.Fatal("the second start reused the container")
	}
	wait(t, ctx, d, h2)
	if err := d.Recover(ctx, h1); !isGoneErr(err) {
		t.Fatalf("the first container should be gone: %v", err)
	}

	// A running one does not: the agent should have recovered it.
	running := probeSpec(t, "sidecar")
	startReady(t, ctx, d, running)
	if _, err := d.Start(ctx, running); err == nil || !strings.Contains(err.Error(), "already runs") {
		t.Fatalf("second start of a running container: %v", err)
	}
}

func TestPortsPublishedOnTheSameHostPort(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := newTestDriver(t, Config{})
	port := freePort(t)
	spec := probeSpec(t, "web", "serve", strconv.Itoa(port))
	spec.Ports = []int{port}
	h := start(t, ctx, d, spec)
	expectHTTP(t, ctx, port)
	if err := d.Signal(ctx, h, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if exit := wait(t, ctx, d, h); exit.Code != 0 {
		t.Fatalf("exit: %+v", exit)
	}
}

func TestHostNetwork(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := newTestDriver(t, Config{Network: "host"})
	port := freePort(t)
	spec := probeSpec(t, "web", "serve", strconv.Itoa(port))
	spec.Ports = []int{port}
	h := start(t, ctx, d, spec)
	expectHTTP(t, ctx, port)
	info, err := d.cli.ContainerInspect(ctx, h.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.HostConfig.NetworkMode != "host" || len(info.HostConfig.PortBindings) != 0 {
		t.Fatalf("host config: network %q, bindings %v", info.HostConfig.NetworkMode, info.HostConfig.PortBindings)
	}
}

func TestContainerAsCreated(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := newTestDriver(t, Config{})
	spec := probeSpec(t, "app")
	spec.CPUMillis = 500
	spec.MemoryBytes = 64 << 20
	h, _ := startReady(t, ctx, d, spec)
	info, err := d.cli.ContainerInspect(ctx, h.ID)
	if err != nil {
		t.Fatal(err)
	}
	hc := info.HostConfig
	if hc.NanoCPUs != 500_000_000 || hc.Memory != 64<<20 || hc.MemorySwap != 64<<20 {
		t.Errorf("resources: nano cpus %d, memory %d, swap %d", hc.NanoCPUs, hc.Memory, hc.MemorySwap)
	}
	if hc.RestartPolicy.Name != container.RestartPolicyDisabled {
		t.Errorf("restart policy: %q", hc.RestartPolicy.Name)
	}
	if hc.LogConfig.Type != "json-file" {
		t.Errorf("log driver: %q", hc.LogConfig.Type)
	}
	want := map[string]string{
		LabelTask: spec.TaskID, LabelTaskUID: spec.TaskUID, LabelContainer: "app", LabelAgent: d.Agent(),
	}
	for k, v := range want {
		if info.Config.Labels[k] != v {
			t.Errorf("label %s: %q, want %q", k, info.Config.Labels[k], v)
		}
	}
	if name := strings.TrimPrefix(info.Name, "/"); name != containerName(spec.TaskID, spec.TaskUID, spec.Container) {
		t.Errorf("name: %q", name)
	}
}

func TestMemoryLimitKills(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	probeImage(t)
	if !engine.memoryLimit {
		t.Skip("the engine has no memory limit support")
	}
	d := newTestDriver(t, Config{})
	spec := probeSpec(t, "hog", "alloc", "256")
	spec.MemoryBytes = 16 << 20
	h, _ := startReady(t, ctx, d, spec)
	if err := d.Signal(ctx, h, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	exit := wait(t, ctx, d, h)
	if !exit.OOMKilled || exit.Code != 137 || exit.Signal != syscall.SIGKILL {
		t.Fatalf("exit: %+v, want OOMKilled with 137 (SIGKILL)", exit)
	}

	// A SIGKILL is not an OOM kill, limit or not.
	spec = probeSpec(t, "killed")
	spec.MemoryBytes = 16 << 20
	h, _ = startReady(t, ctx, d, spec)
	if err := d.Signal(ctx, h, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exit = wait(t, ctx, d, h)
	if exit.OOMKilled || exit.Code != 137 || exit.Signal != syscall.SIGKILL {
		t.Fatalf("exit: %+v, want 137 (SIGKILL) without OOMKilled", exit)
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	probeImage(t)
	d := newTestDriver(t, Config{})
	fp := d.Fingerprint(testCtx(t))
	if !fp.Available || !strings.HasPrefix(fp.Detail, "Docker Engine ") {
		t.Fatalf("Fingerprint: %+v", fp)
	}
}

func TestUnreachableEngine(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	spec := driver.Spec{TaskID: "t", TaskUID: "u", Container: "c", Image: "busybox:latest"}
	for _, host := range []string{"unix:///nonexistent/docker.sock", "bogus-scheme://x"} {
		d := New(Config{Host: host, Agent: "nobody"})
		fp := d.Fingerprint(ctx)
		if fp.Available || fp.Detail == "" {
			t.Errorf("%s: Fingerprint %+v, want unavailable with a reason", host, fp)
		}
		if _, err := d.Start(ctx, spec); !errors.Is(err, driver.ErrUnavailable) {
			t.Errorf("%s: Start: %v, want ErrUnavailable", host, err)
		}
		if _, err := d.List(ctx); !errors.Is(err, driver.ErrUnavailable) {
			t.Errorf("%s: List: %v, want ErrUnavailable", host, err)
		}
		d.Close()
	}
}

// freePort is a TCP port nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// expectHTTP waits, within ctx, for the probe to answer on the host port.
func expectHTTP(t *testing.T, ctx context.Context, port int) {
	t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	var last error
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) == "probe" {
				return
			}
			err = fmt.Errorf("status %s, body %q", resp.Status, body)
		}
		last = err
		// The program is starting its listener; poll the condition.
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("GET %s: %v", url, last)
}

func TestUserAndGroup(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := newTestDriver(t, Config{})
	for _, tc := range []struct {
		name        string
		user, group uint32
		want        string
	}{
		{"the image's own", 0, 0, "0 0\n"},
		{"user and group", 1337, 1337, "1337 1337\n"},
		{"user alone", 1337, 0, "1337 0\n"},
		{"group alone", 0, 4242, "0 4242\n"},
	} {
		spec := probeSpec(t, "ids-"+strconv.Itoa(int(tc.user))+"-"+strconv.Itoa(int(tc.group)), "ids")
		spec.User, spec.Group = tc.user, tc.group
		h := start(t, ctx, d, spec)
		if exit := wait(t, ctx, d, h); exit.Code != 0 {
			t.Fatalf("%s: exit: %+v", tc.name, exit)
		}
		if got := readLog(t, ctx, d, h, driver.Stdout); got != tc.want {
			t.Errorf("%s: ids = %q, want %q", tc.name, got, tc.want)
		}
	}
}
