//go:build linux

package exec_test

import (
	"strconv"
	"syscall"
	"testing"
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
