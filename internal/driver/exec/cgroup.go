package exec

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// The controllers the driver uses for a container's limits.
var limitControllers = []string{"cpu", "memory"}

// cpuPeriod is the cpu.max period in microseconds; the quota is the share
// of it the container may use.
const cpuPeriod = 100000

// cpuMaxValue is what cpu.max gets for a limit in millicores (1000 = one
// core): quota and period in microseconds. The kernel refuses a quota below
// 1 ms, so a tiny limit is raised to that.
func cpuMaxValue(millis int64) string {
	if millis <= 0 {
		return fmt.Sprintf("max %d", cpuPeriod)
	}
	quota := millis * cpuPeriod / 1000
	quota = max(quota, 1000)
	return fmt.Sprintf("%d %d", quota, cpuPeriod)
}

// memoryMaxValue is what memory.max gets for a limit in bytes.
func memoryMaxValue(bytes int64) string {
	if bytes <= 0 {
		return "max"
	}
	return strconv.FormatInt(bytes, 10)
}

// parseOOMKills returns the oom_kill count of a memory.events file: how
// many processes of the group the kernel killed for its memory limit.
func parseOOMKills(events string) int64 {
	for line := range strings.SplitSeq(events, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == "oom_kill" {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return 0
}

// missingControllers returns which of want are not in have (a
// cgroup.controllers or cgroup.subtree_control line).
func missingControllers(have string, want []string) []string {
	got := map[string]bool{}
	for _, c := range strings.Fields(have) {
		got[c] = true
	}
	var out []string
	for _, c := range want {
		if !got[c] {
			out = append(out, c)
		}
	}
	return out
}

// cgroupName names a container's group: the task's incarnation and the
// container, so that an operator can tell whose it is, plus a random suffix
// so that a restarted container never inherits a group (and its OOM count)
// from the run before. Characters a group name should not hold become '_'.
func cgroupName(taskUID, taskID, container, suffix string) string {
	task := taskUID
	if task == "" {
		task = taskID
	}
	if task == "" {
		task = "task"
	}
	name := task + "." + container + "." + suffix
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := b.String()
	// Names starting with a dot would be hidden; "cgroup." is the kernel's.
	if out[0] == '.' || strings.HasPrefix(out, "cgroup.") {
		out = "t" + out
	}
	return out
}

// checkCgroupParent: the parent group is a relative path below the root.
func checkCgroupParent(parent string) error {
	if filepath.IsAbs(parent) {
		return fmt.Errorf("cgroup parent: %q must be relative to the cgroup root", parent)
	}
	clean := filepath.Clean(parent)
	if clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return fmt.Errorf("cgroup parent: %q is not below the cgroup root", parent)
	}
	return nil
}

// within reports whether path is strictly below dir, so that a damaged
// handle cannot make Destroy remove some other group.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// cgroups is what the probe found: where container groups go and which
// limits they can carry.
type cgroups struct {
	// parent is the absolute directory of the parent group; empty when
	// containers get no group at all.
	parent string
	// cpu and memory say which controllers the parent hands its children.
	cpu, memory bool
	// note says what is not enforced and why; empty when everything is.
	note string
}

// describe is the one line Fingerprint and the startup note give.
func (c cgroups) describe() string {
	var on []string
	if c.cpu {
		on = append(on, "cpu")
	}
	if c.memory {
		on = append(on, "memory")
	}
	switch {
	case c.parent == "":
		return "cgroup limits not enforced: " + c.note
	case len(on) == 0:
		return fmt.Sprintf("each container in its own cgroup under %s; cgroup limits not enforced: %s", c.parent, c.note)
	case c.note != "":
		return fmt.Sprintf("cgroup v2 %s limits enforced under %s; not enforced: %s", strings.Join(on, ", "), c.parent, c.note)
	default:
		return fmt.Sprintf("cgroup v2 %s limits enforced under %s", strings.Join(on, ", "), c.parent)
	}
}
