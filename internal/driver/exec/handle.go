package exec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"trellis.dev/trellis/internal/driver"
)

// Name is the driver's name in task definitions and handles.
const Name = "exec"

// handleState is what Handle.State holds: everything needed to find the
// process again, tell it from a process that reuses its pid, and act for it
// (signal, exec, rotate its logs, remove its cgroup) after an agent restart,
// when the Spec may no longer be at hand.
type handleState struct {
	// StartTicks is field 22 of /proc/<pid>/stat: when the process started,
	// in clock ticks since boot. A pid and its start time name one process
	// for the life of the host.
	StartTicks uint64 `json:"start_ticks"`
	// Cgroup is the container's cgroup directory; empty when it has none.
	Cgroup string `json:"cgroup,omitempty"`
	// Stdout and Stderr are the log files the rotator looks after.
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// Dir and Env are the container's working directory and environment,
	// which Exec gives the commands it runs.
	Dir string   `json:"dir"`
	Env []string `json:"env,omitempty"`
	// Netns is the task's network namespace, where the process runs and
	// Exec runs commands; empty for the host's network.
	Netns string `json:"netns,omitempty"`
	// Cred is the uid and gid the process runs as, and Exec's commands
	// with it; nil for the agent's own.
	Cred *credential `json:"cred,omitempty"`
}

func encodeHandle(pid int, started time.Time, st handleState) (driver.Handle, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return driver.Handle{}, fmt.Errorf("handle state: %w", err)
	}
	return driver.Handle{Driver: Name, ID: strconv.Itoa(pid), StartedAt: started, State: b}, nil
}

// decodeHandle reads a handle back. Handles come from the agent's stored
// state, so a damaged one is reported, naming the field, never trusted.
func decodeHandle(h driver.Handle) (int, handleState, error) {
	var st handleState
	if h.Driver != Name {
		return 0, st, fmt.Errorf("handle driver: %q is not %q", h.Driver, Name)
	}
	pid, err := strconv.Atoi(h.ID)
	if err != nil || pid <= 0 {
		return 0, st, fmt.Errorf("handle id: %q is not a pid", h.ID)
	}
	if len(h.State) == 0 {
		return 0, st, errors.New("handle state: empty")
	}
	dec := json.NewDecoder(bytes.NewReader(h.State))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return 0, st, fmt.Errorf("handle state: %w", err)
	}
	if st.StartTicks == 0 {
		return 0, st, errors.New("handle state: start_ticks is missing")
	}
	return pid, st, nil
}

// procStat is what the driver needs from /proc/<pid>/stat.
type procStat struct {
	State      byte   // field 3: R, S, D, Z, ...
	StartTicks uint64 // field 22
}

// parseProcStat parses the contents of /proc/<pid>/stat. The command name
// (field 2) is in parentheses and may itself hold spaces and parentheses, so
// the fields are counted from the last ')'.
func parseProcStat(b []byte) (procStat, error) {
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return procStat{}, errors.New("proc stat: no command name")
	}
	// Fields after the name start at field 3 (state).
	fields := bytes.Fields(b[end+1:])
	const state, start = 3, 22
	if len(fields) < start-state+1 {
		return procStat{}, fmt.Errorf("proc stat: %d fields after the name, want at least %d", len(fields), start-state+1)
	}
	if len(fields[0]) != 1 {
		return procStat{}, fmt.Errorf("proc stat: state %q", fields[0])
	}
	ticks, err := strconv.ParseUint(string(fields[start-state]), 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("proc stat: start time: %w", err)
	}
	return procStat{State: fields[0][0], StartTicks: ticks}, nil
}
