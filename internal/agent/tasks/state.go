package tasks

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/atomicfile"
)

// Local state: what the agent keeps in its data dir.
//
//	<data-dir>/agent.json        the local API's address (for `agent leave`
//	                             and to keep the port across restarts)
//	<data-dir>/tasks/<uid>.json  one record per task the agent took on
//	<data-dir>/tasks/<uid>/      the task's directory; logs/ inside
//
// Files are replaced atomically (write a temporary file, sync, rename), so
// a SIGKILL leaves either the old record or the new one, never half.

// record is a task's local state.
type record struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// Resource is the task as the store last had it (protojson), for the
	// admission of other tasks before the store has been heard again.
	Resource json.RawMessage `json:"resource,omitempty"`
	// Definition is the task definition, protojson-encoded (immutable, so
	// a restarted agent needs no server to resume).
	Definition json.RawMessage `json:"definition"`
	// Token is the secret of the task's metadata URI.
	Token string `json:"token"`
	// Snapshot is the runner's last report; Snapshot.State its own state.
	Snapshot Snapshot `json:"snapshot"`
	// Started: Run was called (a resume passes the saved state, or nil
	// when the runner never reported one).
	Started bool `json:"started"`
	// StopReason is set once a stop was asked for; a resumed task is asked
	// again.
	StopReason string `json:"stop_reason,omitempty"`
	// Silent: the task was deleted from the store; nothing is reported.
	Silent bool `json:"silent,omitempty"`
	// Done: the task has stopped here; only its report remains to store.
	Done bool `json:"done,omitempty"`
	// Network is a bridge task's network: its namespace, address and
	// ports, adopted by a restarted agent.
	Network *taskNetwork `json:"network,omitempty"`
	// Hooks is where the task is with the agent's components' hooks:
	// which Prestarts were called and completed, which Poststops have
	// returned.
	Hooks *hookProgress `json:"hooks,omitempty"`
}

func (r *record) definition() (*pborch.TaskDefinition, error) {
	var td pborch.TaskDefinition
	if err := protojson.Unmarshal(r.Definition, &td); err != nil {
		return nil, fmt.Errorf("definition: %w", err)
	}
	return &td, nil
}

func (r *record) resource() (*pbresource.Resource, error) {
	if len(r.Resource) == 0 {
		return nil, errors.New("resource: none recorded")
	}
	var res pbresource.Resource
	if err := protojson.Unmarshal(r.Resource, &res); err != nil {
		return nil, fmt.Errorf("resource: %w", err)
	}
	return &res, nil
}

func encodeResource(res *pbresource.Resource) (json.RawMessage, error) {
	if res == nil {
		return nil, nil
	}
	return protojson.Marshal(res)
}

func encodeDefinition(td *pborch.TaskDefinition) (json.RawMessage, error) {
	return protojson.Marshal(td)
}

// stateDir is the local state of one agent.
type stateDir struct{ root string }

func (d stateDir) tasksDir() string             { return filepath.Join(d.root, "tasks") }
func (d stateDir) recordPath(uid string) string { return filepath.Join(d.tasksDir(), uid+".json") }
func (d stateDir) agentPath() string            { return filepath.Join(d.root, "agent.json") }

func (d stateDir) init() error {
	if err := os.MkdirAll(d.tasksDir(), 0o700); err != nil {
		return fmt.Errorf("-data-dir: %w", err)
	}
	return nil
}

// saveRecord replaces a task's record.
func (d stateDir) saveRecord(r *record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	// Not fsynced (atomicfile): after a machine crash a damaged record is
	// reported and left, and the servers have marked the instance's tasks LOST.
	return atomicfile.Write(d.recordPath(r.UID), b)
}

// removeTask removes a task's record and directory.
func (d stateDir) removeTask(uid string) error {
	err := os.Remove(d.recordPath(uid))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return errors.Join(err, os.RemoveAll(TaskDir(d.root, uid)))
}

// loadRecords reads every task record. A record that cannot be read is
// returned as an error beside the others, not silently dropped: the
// agent logs it and leaves the file for a person to look at.
func (d stateDir) loadRecords() ([]*record, []error) {
	entries, err := os.ReadDir(d.tasksDir())
	if err != nil {
		return nil, []error{err}
	}
	var out []*record
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d.tasksDir(), name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		if r.UID+".json" != name {
			errs = append(errs, fmt.Errorf("%s: holds task uid %q", name, r.UID))
			continue
		}
		out = append(out, &r)
	}
	return out, errs
}

// removeOrphans removes task directories without a record (tasks that
// finished before the agent last stopped) and temporary files a killed
// agent left half written.
func (d stateDir) removeOrphans(keep map[string]bool) {
	entries, err := os.ReadDir(d.tasksDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		switch {
		case e.IsDir() && !keep[e.Name()]:
			_ = os.RemoveAll(filepath.Join(d.tasksDir(), e.Name()))
		case !e.IsDir() && strings.HasPrefix(e.Name(), "."):
			_ = os.Remove(filepath.Join(d.tasksDir(), e.Name()))
		}
	}
}

// agentFile is <data-dir>/agent.json.
type agentFile struct {
	// HTTPAddr is the address the local API last listened on.
	HTTPAddr string `json:"http_addr"`
	Name     string `json:"name"`
}

// WriteAgentFile records in dataDir the local API's address of the agent
// of instance name.
func WriteAgentFile(dataDir, httpAddr, name string) error {
	b, err := json.Marshal(agentFile{HTTPAddr: httpAddr, Name: name})
	if err != nil {
		return err
	}
	return atomicfile.Write(stateDir{dataDir}.agentPath(), b)
}

// ReadAgentFile reads the local API address a (running or last) agent
// recorded in dataDir.
func ReadAgentFile(dataDir string) (httpAddr string, err error) {
	b, err := os.ReadFile(stateDir{dataDir}.agentPath())
	if err != nil {
		return "", err
	}
	var f agentFile
	if err := json.Unmarshal(b, &f); err != nil {
		return "", fmt.Errorf("%s: %w", stateDir{dataDir}.agentPath(), err)
	}
	return f.HTTPAddr, nil
}

// RecordPath is the file of the local state of the task with uid under
// dataDir.
func RecordPath(dataDir, uid string) string { return stateDir{dataDir}.recordPath(uid) }
