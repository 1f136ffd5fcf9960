//go:build linux

package exec_test

import (
	"encoding/json"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/driver/exec"
)

// cgroup2Root finds a writable cgroup v2 hierarchy: the default root on a
// cgroup v2 host, the "unified" one on a hybrid host (where it has no
// controllers, so containers get groups but no limits). It skips the test
// when there is none.
func cgroup2Root(t *testing.T) string {
	t.Helper()
	for _, root := range []string{exec.DefaultCgroupRoot, filepath.Join(exec.DefaultCgroupRoot, "unified")} {
		var fs unix.Statfs_t
		if unix.Statfs(root, &fs) == nil && fs.Type == unix.CGROUP2_SUPER_MAGIC && unix.Access(root, unix.W_OK) == nil {
			return root
		}
	}
	t.Skip("no writable cgroup v2 hierarchy on this host (cgroup v1 only, or not root)")
	return ""
}

// limitsDriver returns a Driver on the host's cgroup v2 root, skipping the
// test unless that root enforces the given controllers.
func limitsDriver(t *testing.T, controllers ...string) *exec.Driver {
	t.Helper()
	d := newDriver(t, exec.Config{CgroupRoot: exec.DefaultCgroupRoot})
	detail := d.Fingerprint(ctxFor(t)).Detail
	for _, c := range controllers {
		enforced, _, _ := strings.Cut(detail, "not enforced")
		if !strings.Contains(enforced, c) {
			t.Skipf("cgroup v2 %s limits are not available on this host: %s", c, detail)
		}
	}
	return d
}

// Each container gets its own group from its first instruction
// (CLONE_INTO_CGROUP): the program itself reports it.
func TestContainerStartsInItsCgroup(t *testing.T) {
	root := cgroup2Root(t)
	parent := "trellis-test-" + randomName()
	d := newDriver(t, exec.Config{CgroupRoot: root, CgroupParent: parent})
	t.Logf("fingerprint: %s", d.Fingerprint(ctxFor(t)).Detail)
	spec := testSpec(t, "cat", "/proc/self/cgroup")
	h := start(t, d, spec)
	wait(t, d, h)
	group := handleCgroup(t, h)
	if !strings.HasPrefix(group, filepath.Join(root, parent)+"/") {
		t.Fatalf("cgroup %q is not under %s/%s", group, root, parent)
	}
	want := "0::/" + strings.TrimPrefix(group, root+"/") + "\n"
	if got := readLogs(t, d, h, spec, driver.Stdout); !strings.Contains(got, want) {
		t.Errorf("/proc/self/cgroup = %q, want the line %q", got, want)
	}
	if err := d.Destroy(ctxFor(t), h); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(group); !os.IsNotExist(err) {
		t.Errorf("cgroup %s still there after Destroy (%v)", group, err)
	}
}

// A process that left the container's process group is still in its
// cgroup: Destroy kills it and removes the group, and a second Destroy is a
// no-op.
func TestDestroyKillsWhatIsLeftInTheCgroup(t *testing.T) {
	root := cgroup2Root(t)
	d := newDriver(t, exec.Config{CgroupRoot: root})
	spec := testSpec(t, "sh", "-c", `setsid sh -c 'echo $$ > escaped; exec sleep 1000' </dev/null & exit 0`)
	h := start(t, d, spec)
	_, escaped := readPid(t, filepath.Join(spec.TaskDir, "escaped"))
	if exit := wait(t, d, h); exit.Code != 0 {
		t.Fatalf("exit = %+v", exit)
	}
	// A group signal misses it: it is in a session of its own.
	if err := d.Signal(ctxFor(t), h, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := d.Destroy(ctxFor(t), h); err != nil {
			t.Fatalf("Destroy: %v", err)
		}
	}
	if !exitedWithin(escaped, deadline) {
		t.Fatal("the escaped process survived Destroy")
	}
	if _, err := os.Stat(handleCgroup(t, h)); !os.IsNotExist(err) {
		t.Errorf("cgroup still there after Destroy (%v)", err)
	}
}

// The cgroup outlives an agent restart: the recovered handle still names
// it, and Destroy from the new Driver removes it.
func TestRecoveredContainerKeepsItsCgroup(t *testing.T) {
	root := cgroup2Root(t)
	parent := "trellis-test-" + randomName()
	spec := testSpec(t, "sleep", "1000")
	h := startInOtherAgent(t, spec, root, parent)
	d := newDriver(t, exec.Config{CgroupRoot: root, CgroupParent: parent})
	if err := d.Recover(ctxFor(t), h); err != nil {
		t.Fatal(err)
	}
	group := handleCgroup(t, h)
	procs, err := os.ReadFile(filepath.Join(group, "cgroup.procs"))
	if err != nil || strings.TrimSpace(string(procs)) != h.ID {
		t.Fatalf("cgroup.procs = %q (%v), want %s", procs, err, h.ID)
	}
	if err := d.Signal(ctxFor(t), h, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait(t, d, h)
	if err := d.Destroy(ctxFor(t), h); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(group); !os.IsNotExist(err) {
		t.Errorf("cgroup %s still there after Destroy (%v)", group, err)
	}
}

// A handle naming a cgroup outside the driver's parent is refused, not
// removed.
func TestDestroyRefusesAForeignCgroup(t *testing.T) {
	d := newDriver(t, exec.Config{})
	h := start(t, d, testSpec(t, "true"))
	wait(t, d, h)
	var st map[string]any
	if err := json.Unmarshal(h.State, &st); err != nil {
		t.Fatal(err)
	}
	st["cgroup"] = "/sys/fs/cgroup/system.slice"
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	h.State = b
	if err := d.Destroy(ctxFor(t), h); err == nil || !strings.Contains(err.Error(), "is not below") {
		t.Fatalf("Destroy = %v, want a refusal", err)
	}
}

func TestMemoryLimitKills(t *testing.T) {
	d := limitsDriver(t, "memory")
	spec := testSpec(t, os.Args[0])
	spec.Env = map[string]string{roleEnv: "hog"}
	spec.MemoryBytes = 64 << 20
	h := start(t, d, spec)
	exit := wait(t, d, h)
	if !exit.OOMKilled || exit.Signal != syscall.SIGKILL || exit.Code != 137 {
		t.Fatalf("exit = %+v, want OOMKilled by SIGKILL", exit)
	}
	got, err := os.ReadFile(filepath.Join(handleCgroup(t, h), "memory.max"))
	if err != nil || strings.TrimSpace(string(got)) != "67108864" {
		t.Errorf("memory.max = %q (%v)", got, err)
	}
}

func TestCPULimitIsSet(t *testing.T) {
	d := limitsDriver(t, "cpu")
	spec := testSpec(t, "sleep", "1000")
	spec.CPUMillis = 250
	h := start(t, d, spec)
	got, err := os.ReadFile(filepath.Join(handleCgroup(t, h), "cpu.max"))
	if err != nil || strings.TrimSpace(string(got)) != "25000 100000" {
		t.Errorf("cpu.max = %q (%v), want a quarter of a core", got, err)
	}
}

// Without a memory limit, no OOM is reported and nothing is written.
func TestNoLimitsNoOOM(t *testing.T) {
	d := newDriver(t, exec.Config{})
	h := start(t, d, testSpec(t, "sh", "-c", "exit 0"))
	if exit := wait(t, d, h); exit.OOMKilled {
		t.Errorf("exit = %+v, want no OOM", exit)
	}
}

// A SIGKILL through a handle naming another cgroup kills the container's
// process group but never the other group's processes.
func TestSignalSparesAForeignCgroup(t *testing.T) {
	root := cgroup2Root(t)
	victimGroup := filepath.Join(root, "trellis-test-victim-"+randomName())
	if err := os.Mkdir(victimGroup, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := osexec.Command("sleep", "1000")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = victim.Process.Kill()
		_ = victim.Wait()
		_ = os.Remove(victimGroup)
	})
	if err := os.WriteFile(filepath.Join(victimGroup, "cgroup.procs"), []byte(strconv.Itoa(victim.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}

	d := newDriver(t, exec.Config{CgroupRoot: root})
	h := start(t, d, testSpec(t, "sleep", "1000"))
	var st map[string]any
	if err := json.Unmarshal(h.State, &st); err != nil {
		t.Fatal(err)
	}
	st["cgroup"] = victimGroup
	forged := h
	forged.State, _ = json.Marshal(st)
	if err := d.Signal(ctxFor(t), forged, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if exit := wait(t, d, h); exit.Signal != syscall.SIGKILL {
		t.Errorf("container exit = %+v, want SIGKILL", exit)
	}
	// Had the victim's group been killed, it would not end by TERM.
	_ = victim.Process.Signal(syscall.SIGTERM)
	err := victim.Wait()
	if ws, ok := victim.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGTERM {
		t.Errorf("victim ended with %v, want SIGTERM: the forged handle reached it", err)
	}
}
