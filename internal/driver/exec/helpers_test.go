//go:build linux

package exec_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/driver/exec"
	"trellis.dev/trellis/internal/testlog"
)

// deadline bounds every wait in these tests: long enough for a loaded
// machine, short enough that a hang fails instead of stalling.
const deadline = 30 * time.Second

// ctxFor returns a context that ends at the deadline (and with t).
func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	if t != nil {
		t.Cleanup(cancel)
	} else {
		_ = cancel // the fake agent exits right away
	}
	return ctx
}

func randomName() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newDriver returns a Driver whose cgroups (where the host has them) go in
// a parent group of the test's own, removed at the end.
func newDriver(t *testing.T, cfg exec.Config) *exec.Driver {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testlog.Logger(t)
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = "trellis-test-" + randomName()
	}
	root := cfg.CgroupRoot
	if root == "" {
		root = exec.DefaultCgroupRoot
	}
	parent := filepath.Join(root, cfg.CgroupParent)
	t.Cleanup(func() { _ = os.Remove(parent) })
	return exec.New(cfg)
}

// testSpec is a container running cmd, with a fresh task and log dir.
func testSpec(t *testing.T, cmd ...string) driver.Spec {
	t.Helper()
	dir := t.TempDir()
	taskDir := filepath.Join(dir, "task")
	if err := os.Mkdir(taskDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return driver.Spec{
		TaskID:    "default/" + t.Name(),
		TaskUID:   randomName(),
		Container: "app",
		Command:   cmd,
		LogDir:    filepath.Join(dir, "logs"),
		TaskDir:   taskDir,
	}
}

// start starts spec and, at the end of the test, kills what is left of it
// and destroys it.
func start(t *testing.T, d *exec.Driver, spec driver.Spec) driver.Handle {
	t.Helper()
	h, err := d.Start(ctxFor(t), spec)
	if err != nil {
		t.Fatalf("Start(%q): %v", spec.Command, err)
	}
	t.Cleanup(func() { cleanup(t, d, h) })
	return h
}

func cleanup(t *testing.T, d *exec.Driver, h driver.Handle) {
	ctx := ctxFor(t)
	if err := d.Signal(ctx, h, syscall.SIGKILL); err != nil {
		t.Errorf("cleanup: Signal: %v", err)
	}
	if _, err := d.Wait(ctx, h); err != nil {
		t.Errorf("cleanup: Wait: %v", err)
	}
	if err := d.Destroy(ctx, h); err != nil {
		t.Errorf("cleanup: Destroy: %v", err)
	}
}

// wait waits for the container to exit, failing the test at the deadline.
func wait(t *testing.T, d *exec.Driver, h driver.Handle) driver.Exit {
	t.Helper()
	exit, err := d.Wait(ctxFor(t), h)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return exit
}

// readLogs reads a whole stream without following.
func readLogs(t *testing.T, d *exec.Driver, h driver.Handle, spec driver.Spec, stream driver.Stream) string {
	t.Helper()
	r, err := d.Logs(ctxFor(t), h, spec, stream, false)
	if err != nil {
		t.Fatalf("Logs(%s): %v", stream, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("Logs(%s): %v", stream, err)
	}
	return string(b)
}

// eventually polls cond until it holds, failing the test at the deadline.
// It waits on a condition, never on a guessed duration.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// readPid waits for a script to write a pid into file, and returns a
// pidfd for it, so that the test can later see that process end.
func readPid(t *testing.T, file string) (int, int) {
	t.Helper()
	var pid string
	eventually(t, "a pid in "+file, func() bool {
		b, err := os.ReadFile(file)
		pid = strings.TrimSpace(string(b))
		return err == nil && strings.HasSuffix(string(b), "\n")
	})
	var n int
	if err := json.Unmarshal([]byte(pid), &n); err != nil {
		t.Fatalf("%s: %q is not a pid", file, pid)
	}
	fd, err := unix.PidfdOpen(n, 0)
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v", n, err)
	}
	t.Cleanup(func() {
		_ = unix.Kill(n, unix.SIGKILL)
		unix.Close(fd)
	})
	return n, fd
}

// exitedWithin reports whether the process behind pidfd exits before d.
func exitedWithin(pidfd int, d time.Duration) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if left <= 0 {
			return false
		}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n > 0
	}
}

// startInOtherAgent starts spec from a fake agent process that exits at
// once, and returns the handle it printed. The container then runs on,
// no child of this process, as after an agent restart.
func startInOtherAgent(t *testing.T, spec driver.Spec, cgroupRoot, cgroupParent string) driver.Handle {
	t.Helper()
	return startInAgent(t, agentInput{Spec: spec, CgroupRoot: cgroupRoot, CgroupParent: cgroupParent})
}

// startInAgent is startInOtherAgent with the fake agent's whole input.
func startInAgent(t *testing.T, input agentInput) driver.Handle {
	t.Helper()
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	cmd := osexec.Command(os.Args[0])
	// GORACE: a race-enabled binary otherwise lingers a second at exit.
	cmd.Env = append(os.Environ(), roleEnv+"=agent", agentEnv+"="+string(in), "GORACE=atexit_sleep_ms=0")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("fake agent: %v", err)
	}
	var h driver.Handle
	if err := json.Unmarshal(out, &h); err != nil {
		t.Fatalf("fake agent printed %q: %v", out, err)
	}
	return h
}

// handleCgroup returns the cgroup directory recorded in a handle.
func handleCgroup(t *testing.T, h driver.Handle) string {
	t.Helper()
	var st struct {
		Cgroup string `json:"cgroup"`
	}
	if err := json.Unmarshal(h.State, &st); err != nil {
		t.Fatal(err)
	}
	return st.Cgroup
}

// withStartTicks returns h with its recorded start time changed, as if its
// pid now belonged to a process started at another time.
func withStartTicks(t *testing.T, h driver.Handle, delta int64) driver.Handle {
	t.Helper()
	var st map[string]any
	if err := json.Unmarshal(h.State, &st); err != nil {
		t.Fatal(err)
	}
	st["start_ticks"] = st["start_ticks"].(float64) + float64(delta)
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	h.State = b
	return h
}
