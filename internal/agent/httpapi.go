package agent

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"sort"
	"time"

	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/orchestrator"
)

// The local API. It listens on loopback by default: its callers are the
// tasks of this instance (the metadata endpoint, reached with a secret
// per-task token) and the CLI (logs, leave).
//
//	GET  /v1/metadata/{token}        the task's metadata (TaskMetadata)
//	GET  /v1/metadata/{token}/task   the same
//	GET  /v1/tasks/{namespace}/{name}/logs/{container}?stream=stdout|stderr&follow=1
//	GET  /v1/agent/self              the agent and its tasks (Self)
//	POST /v1/agent/leave             Leave, answered once it is done
func (a *Agent) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/metadata/{token}", a.serveMetadata)
	mux.HandleFunc("GET /v1/metadata/{token}/task", a.serveMetadata)
	mux.HandleFunc("GET /v1/tasks/{namespace}/{name}/logs/{container}", a.serveLogs)
	mux.HandleFunc("GET /v1/agent/self", a.serveSelf)
	mux.HandleFunc("POST /v1/agent/leave", a.serveLeave)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, wire.CodeNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	return mux
}

// TaskMetadata is what a task reads at TRELLIS_TASK_METADATA_URI: its own
// state and its containers', as the agent knows it now (fresher than the
// store).
type TaskMetadata struct {
	Namespace      string `json:"namespace"`
	Name           string `json:"name"`
	UID            string `json:"uid"`
	TaskDefinition string `json:"task_definition"`
	Instance       string `json:"instance"`
	// DesiredStatus is RUNNING or STOPPED; LastStatus PENDING, RUNNING or
	// STOPPED.
	DesiredStatus string            `json:"desired_status"`
	LastStatus    string            `json:"last_status"`
	Health        string            `json:"health"`
	StopReason    string            `json:"stop_reason,omitempty"`
	StartedAt     time.Time         `json:"started_at,omitzero"`
	StoppingAt    time.Time         `json:"stopping_at,omitzero"`
	StoppedAt     time.Time         `json:"stopped_at,omitzero"`
	Containers    []ContainerStatus `json:"containers"`
}

func (a *Agent) serveMetadata(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	e := a.tokens[r.PathValue("token")]
	var md TaskMetadata
	if e != nil {
		md = a.metadataLocked(e)
	}
	a.mu.Unlock()
	if e == nil {
		writeError(w, http.StatusNotFound, wire.CodeNotFound, "no task has this metadata token")
		return
	}
	writeJSON(w, http.StatusOK, md)
}

func (a *Agent) metadataLocked(e *task) TaskMetadata {
	s := e.snap
	md := TaskMetadata{
		Namespace:      e.namespace,
		Name:           e.name,
		UID:            e.uid,
		TaskDefinition: orchestrator.TaskDefinitionRef(e.def.GetFamily(), e.def.GetRevision()),
		Instance:       a.cfg.Name,
		DesiredStatus:  e.stored.GetDesiredStatus(),
		LastStatus:     s.Status,
		Health:         s.Health,
		StopReason:     s.StopReason,
		StartedAt:      s.StartedAt,
		StoppingAt:     s.StoppingAt,
		StoppedAt:      s.StoppedAt,
		Containers:     slices.Clone(s.Containers),
	}
	if md.LastStatus == "" {
		md.LastStatus = orchestrator.StatusPending
	}
	if md.Health == "" {
		md.Health = orchestrator.HealthUnknown
	}
	if e.stopReason != "" || e.deleted {
		md.DesiredStatus = orchestrator.StatusStopped
	}
	if md.Containers == nil {
		md.Containers = []ContainerStatus{}
	}
	return md
}

func (a *Agent) serveLogs(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("namespace") + "/" + r.PathValue("name")
	container := r.PathValue("container")
	stream := driver.Stream(r.URL.Query().Get("stream"))
	switch stream {
	case "":
		stream = driver.Stdout
	case driver.Stdout, driver.Stderr:
	default:
		writeError(w, http.StatusBadRequest, wire.CodeInvalidArgument, "stream: "+string(stream)+" is not stdout or stderr")
		return
	}
	follow := false
	switch r.URL.Query().Get("follow") {
	case "", "0", "false":
	case "1", "true":
		follow = true
	default:
		writeError(w, http.StatusBadRequest, wire.CodeInvalidArgument, "follow: give 1 or 0")
		return
	}
	a.mu.Lock()
	e := a.byName[key]
	var runner TaskRunner
	known := false
	if e != nil {
		runner = e.runner
		for _, c := range e.def.GetContainers() {
			known = known || c.GetName() == container
		}
	}
	a.mu.Unlock()
	switch {
	case e == nil:
		writeError(w, http.StatusNotFound, wire.CodeNotFound, "task "+key+" is not on instance "+a.cfg.Name+" (or stopped long ago)")
		return
	case runner == nil:
		writeError(w, http.StatusNotFound, wire.CodeNotFound, "task "+key+" has not started on instance "+a.cfg.Name)
		return
	case !known:
		writeError(w, http.StatusNotFound, wire.CodeNotFound, "task "+key+" has no container "+container)
		return
	}
	rc, err := runner.Logs(r.Context(), container, stream, follow)
	switch {
	case errors.Is(err, ErrNotStarted):
		writeError(w, http.StatusConflict, wire.CodeFailedPrecondition, "task "+key+": "+err.Error())
		return
	case errors.Is(err, driver.ErrGone):
		writeError(w, http.StatusNotFound, wire.CodeNotFound, "task "+key+": "+err.Error())
		return
	case err != nil:
		writeError(w, http.StatusInternalServerError, wire.CodeInternal, "logs: "+err.Error())
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if !follow {
		_, _ = io.Copy(w, rc)
		return
	}
	// Following: send each piece as it comes.
	flusher := http.NewResponseController(w)
	_ = flusher.Flush()
	buf := make([]byte, 32<<10)
	for {
		n, err := rc.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = flusher.Flush()
		}
		if err != nil {
			return
		}
	}
}

// Self is the answer of GET /v1/agent/self.
type Self struct {
	Name    string     `json:"name"`
	Cluster string     `json:"cluster"`
	Address string     `json:"address"`
	Session string     `json:"session"`
	Server  string     `json:"server"`
	Leaving bool       `json:"leaving"`
	Tasks   []SelfTask `json:"tasks"`
}

// SelfTask is one task in Self.
type SelfTask struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// Phase is the agent's: idle, starting, running, stopping, done.
	Phase  string `json:"phase"`
	Status string `json:"status"`
}

func (a *Agent) serveSelf(w http.ResponseWriter, _ *http.Request) {
	a.mu.Lock()
	s := Self{
		Name: a.cfg.Name, Cluster: a.cfg.Cluster, Address: a.address, Session: a.session,
		Server: a.Server(), Leaving: a.leaving, Tasks: []SelfTask{},
	}
	for _, e := range a.tasks {
		s.Tasks = append(s.Tasks, SelfTask{Namespace: e.namespace, Name: e.name, UID: e.uid, Phase: e.phase.String(), Status: e.snap.Status})
	}
	a.mu.Unlock()
	sort.Slice(s.Tasks, func(i, j int) bool {
		if s.Tasks[i].Namespace != s.Tasks[j].Namespace {
			return s.Tasks[i].Namespace < s.Tasks[j].Namespace
		}
		return s.Tasks[i].Name < s.Tasks[j].Name
	})
	writeJSON(w, http.StatusOK, s)
}

func (a *Agent) serveLeave(w http.ResponseWriter, r *http.Request) {
	if err := a.Leave(r.Context()); err != nil {
		code, body := http.StatusInternalServerError, wire.CodeInternal
		if errors.Is(err, r.Context().Err()) {
			code, body = http.StatusGatewayTimeout, wire.CodeDeadlineExceeded
		}
		writeError(w, code, body, "leave: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"left": true})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, body, msg string) {
	writeJSON(w, code, wire.Error{Error: msg, Code: body})
}
