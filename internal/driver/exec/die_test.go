//go:build linux

package exec_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"trellis.dev/trellis/internal/driver/exec"
)

// With DieWithAgent a container dies with the agent's process, however
// that ends (here the fake agent just exits); without it, it runs on
// (TestRecoverAfterAgentRestart), for a restarted agent to adopt.
func TestDieWithAgent(t *testing.T) {
	spec := testSpec(t, "sleep", "1000")
	h := startInAgent(t, agentInput{Spec: spec, CgroupParent: "trellis-test-" + randomName(), DieWithAgent: true})
	pid, _ := strconv.Atoi(h.ID)
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	// The reaper (this test binary's parent) reaps it once it is dead.
	eventually(t, "the container to die with its agent", func() bool {
		return syscall.Kill(pid, 0) == syscall.ESRCH
	})
}

// What a container started in the background outlives the container's
// parent-death signal (it is no child of the agent, and no cgroup holds it
// here: the test gives none); the group log names its process group, and
// KillGroups ends it.
func TestKillGroupsAfterTheAgentDied(t *testing.T) {
	spec := testSpec(t, "/bin/sh", "-c", "sleep 1000 & echo $! > bg.tmp && mv bg.tmp bg; wait")
	log := filepath.Join(t.TempDir(), "groups")
	h := startInAgent(t, agentInput{Spec: spec, CgroupRoot: t.TempDir(), GroupLog: log})
	pid, _ := strconv.Atoi(h.ID)
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	var bg int
	eventually(t, "the background job's pid", func() bool {
		b, err := os.ReadFile(filepath.Join(spec.TaskDir, "bg"))
		bg, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && bg > 0
	})
	// What the parent-death signal does: the container's process dies,
	// not its group.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the container's process to die", func() bool {
		return syscall.Kill(pid, 0) == syscall.ESRCH
	})
	if err := syscall.Kill(bg, 0); err != nil {
		t.Fatalf("the background job is gone before KillGroups (%v): the test proves nothing", err)
	}
	n, err := exec.KillGroups(log)
	if err != nil || n != 1 {
		t.Fatalf("KillGroups: %d, %v; want the one group", n, err)
	}
	eventually(t, "the background job to die", func() bool {
		return syscall.Kill(bg, 0) == syscall.ESRCH
	})
	// Again: nothing left to kill, and no other process touched.
	if n, err := exec.KillGroups(log); err != nil || n != 0 {
		t.Errorf("KillGroups again: %d, %v; want none", n, err)
	}
}
