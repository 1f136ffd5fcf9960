// Package exec is the exec task driver: it runs each container of a task
// as a plain host process, in its own process group and, where the host
// allows, its own cgroup v2 group with the task's cpu and memory limits.
// It implements driver.Driver; the agent's task lifecycle drives it.
//
// # Processes
//
// Start runs Spec.Command directly (no shell) with exactly Spec.Env as its
// environment: nothing of the agent's environment leaks in, except PATH
// when Env sets none, so that a bare command name can be found. The
// command is looked up in the container's PATH, not the agent's. The
// working directory is Spec.WorkingDir, else Spec.TaskDir. Stdin is
// /dev/null. A command that cannot start (not found, not executable, not
// a program, a missing directory) fails Start with an error that names the
// field and the reason; the agent reports it as the task's stop reason.
//
// Spec.User and Spec.Group, when either is not zero, are the process's uid
// and gid (a zero one keeps the agent's), with no supplementary groups;
// Exec's commands run with them too. The working directory must be one
// that uid can enter: the agent's task directory is private to it, so a
// container with a user of its own is given another working directory.
//
// Each container is its own process group (setpgid), so Signal reaches
// the process and everything it started: kill(-pgid, sig). A SIGKILL also
// kills the container's cgroup (cgroup.kill), which catches processes that
// left the group with setsid.
//
// # Networks
//
// A container runs in the host's network, unless Spec.Netns names the
// task's network namespace (network: bridge): the process is then forked
// from a thread that has entered the namespace (internal/netns), so it is
// in the namespace from its first instruction, and so is everything it
// starts; no `ip netns exec` or helper process. The handle records the
// namespace, so that Exec runs health-check commands there too, after an
// agent restart as well.
//
// # Surviving an agent restart
//
// Nothing ties a container to the agent: its stdout and stderr are files
// it holds itself (no pipes through the agent), and it gets no parent-death
// signal. A restarted agent re-attaches with Recover, from the Handle it
// stored. The Handle's ID is the pid; its State (JSON) records the
// process's start time (field 22 of /proc/<pid>/stat, clock ticks since
// boot), its cgroup, log files, working directory and environment. A pid
// with a different start time is another process that reuses the number:
// Recover refuses it with driver.ErrGone, and Signal leaves it alone.
//
// An agent whose tasks nothing would adopt (trellis dev in memory) sets
// Config.DieWithAgent instead: each process gets SIGKILL as its
// parent-death signal, so it dies with the agent's process however that
// ends. The kernel sends it when the thread that forked the process ends,
// and Go ends threads (a goroutine that exits locked to one), so those
// processes are forked from one thread kept for the life of the process
// (forker_linux.go). The signal reaches the container's process only, not
// what it started; Config.GroupLog logs each container's process group so
// that KillGroups can end them once the agent is gone (grouplog_linux.go).
// KillAll kills every container at once (a second Ctrl-C of trellis dev).
//
// Wait uses the os.Process wait for a container the Driver started, so it
// reports the exit status (128+signal for a signal, as shells and Docker
// do). A recovered process is not the agent's child, and its status goes to
// whoever reaps it: the driver watches it through a pidfd (pidfd_open,
// readable once the process exits, registered with Go's poller so that a
// watched container costs no thread) and reports Code -1, unknown. Wait on
// a handle the Driver has not seen recovers it first.
//
// # Logs
//
// Output goes to Spec.LogDir/<Container>.stdout and .stderr, opened
// O_APPEND and handed to the child. A rotation goroutine per container
// checks their sizes every LogRotateInterval and rotates a file that has
// reached LogMaxBytes by copy-truncate: the file is copied to <name>.1
// (older copies move up to .2 ... and the oldest beyond LogMaxFiles is
// dropped) and truncated in place, where the child's next O_APPEND write
// lands at its new end. Copy-truncate can lose what the child writes in
// the instant between the last copy and the truncate; that is the price of
// a process that does not depend on the agent for its output. A file may
// also pass LogMaxBytes by what is written in one interval.
//
// Logs reads the kept files oldest first, then the current one; with
// follow it tails the current file. Readers and the rotator share a lock
// and a rotation count per file, so a follower that meets a rotation goes
// on in the rotated copy from where it was: nothing is read twice or
// skipped, unless the reader falls more than LogMaxFiles-1 rotations
// behind.
//
// # Cgroups
//
// On first use the driver probes CgroupRoot (default /sys/fs/cgroup). When
// it is a cgroup v2 mount the driver can write to, it creates the parent
// group CgroupParent (default "trellis") and hands it the cpu and memory
// controllers. Each container then gets a group of its own,
// <parent>/<task uid>.<container>.<random>, with memory.max (and
// memory.swap.max 0, so that the limit is not met by swapping, and
// memory.oom.group 1, so that an OOM kill takes the whole container) and
// cpu.max from the Spec. The process is created inside its group
// (clone3 with CLONE_INTO_CGROUP), so no instruction of it runs unlimited.
// When the container exits, memory.events tells whether the kernel
// OOM-killed it (Exit.OOMKilled). Destroy kills whatever is left in the
// group and removes it.
//
// Where cgroup v2 is missing (a cgroup v1 or hybrid host), not writable,
// or lacks a controller, the driver logs one clear note and runs without
// the limits it cannot enforce; a writable cgroup v2 without controllers
// still gives each container a group, for Destroy's clean-up. Fingerprint
// states which it is.
//
// # Exec
//
// Exec runs a command for a command health check on the host, with the
// container's environment, working directory and network namespace: an
// exec container has no other isolation to enter. It runs outside the container's cgroup, so that a
// check never counts against the container's memory, in a process group
// of its own that is killed when ctx ends; its combined output is capped
// at ExecOutputLimit.
//
// Off Linux the package compiles but the driver reports itself
// unavailable.
package exec
