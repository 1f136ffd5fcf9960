//go:build linux

package exec_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"trellis.dev/trellis/internal/driver/exec"
	"trellis.dev/trellis/internal/netns"
)

// taskNetns makes a network namespace for the test, as the agent does for
// a bridge task, and returns its path and its id as readlink shows it.
func taskNetns(t *testing.T) (path, id string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a network namespace")
	}
	path = filepath.Join(t.TempDir(), "netns")
	if err := netns.Create(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Remove(path) })
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return path, fmt.Sprintf("net:[%d]", st.Ino)
}

func netnsOf(t *testing.T, pid string) string {
	t.Helper()
	s, err := os.Readlink("/proc/" + pid + "/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A container of a bridge task runs in the task's namespace, and so do
// the processes it starts and the commands Exec runs for it, also after
// an agent restart.
func TestContainerRunsInTheTasksNamespace(t *testing.T) {
	path, id := taskNetns(t)
	d := newDriver(t, exec.Config{})
	spec := testSpec(t, "sh", "-c", "sleep 1000 & echo $! > child; wait")
	spec.Netns = path
	h := start(t, d, spec)

	if got := netnsOf(t, h.ID); got != id {
		t.Fatalf("the container runs in %s, not the task's %s", got, id)
	}
	child, _ := readPid(t, filepath.Join(spec.TaskDir, "child"))
	if got := netnsOf(t, fmt.Sprint(child)); got != id {
		t.Fatalf("the container's child runs in %s, not the task's %s", got, id)
	}
	if own := netnsOf(t, "self"); own == id {
		t.Fatal("the driver's own process moved into the task's namespace")
	}

	check := []string{"readlink", "/proc/self/ns/net"}
	code, out, err := d.Exec(ctxFor(t), h, check)
	if err != nil || code != 0 || strings.TrimSpace(string(out)) != id {
		t.Fatalf("Exec ran in %q (%d, %v), not the task's %s", out, code, err, id)
	}
	// A restarted agent's driver knows the namespace from the handle.
	again := newDriver(t, exec.Config{})
	if err := again.Recover(ctxFor(t), h); err != nil {
		t.Fatal(err)
	}
	code, out, err = again.Exec(ctxFor(t), h, check)
	if err != nil || code != 0 || strings.TrimSpace(string(out)) != id {
		t.Fatalf("after a restart Exec ran in %q (%d, %v), not the task's %s", out, code, err, id)
	}
}

func TestStartInAMissingNamespace(t *testing.T) {
	d := newDriver(t, exec.Config{})
	spec := testSpec(t, "sleep", "1000")
	spec.Netns = filepath.Join(t.TempDir(), "gone")
	_, err := d.Start(ctxFor(t), spec)
	if err == nil || !strings.Contains(err.Error(), "netns: the task's network namespace: open "+spec.Netns+": no such file or directory") {
		t.Fatalf("Start = %v", err)
	}
}
