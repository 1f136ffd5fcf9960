package agent

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/httpapi/wire"
)

// The agent's two HTTP APIs. The control API listens on the control
// socket (mode 0600: the agent's own user alone) and, for remote
// operators, on a TCP control address with mutual TLS:
//
//	GET  /v1/tasks/{namespace}/{name}/logs/{container}?stream=stdout|stderr&follow=1
//	GET  /v1/agent/self              the agent and its tasks (Self)
//	GET  /v1/agent/leaves            the leaf cache's leaves (never a key)
//	POST /v1/agent/leave             Leave, answered once it is done
//
// The metadata endpoint (metadataHandler) is what tasks reach, on the
// TCP address of their TRELLIS_TASK_METADATA_URI; each reads its own
// metadata with its secret token, and nothing else is served there.
func (a *Agent) controlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tasks/{namespace}/{name}/logs/{container}", a.serveLogs)
	mux.HandleFunc("GET /v1/agent/self", a.serveSelf)
	mux.HandleFunc("POST /v1/agent/leave", a.serveLeave)
	mux.HandleFunc("GET /v1/agent/leaves", a.serveLeaves)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, wire.CodeNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	return mux
}

// metadataHandler serves the metadata endpoint alone: what listens on
// the metadata address on the host (host-network tasks) and in bridge
// tasks' namespaces.
func (a *Agent) metadataHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/metadata/{token}", a.serveMetadata)
	mux.HandleFunc("GET /v1/metadata/{token}/task", a.serveMetadata)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, wire.CodeNotFound, "the metadata endpoint serves only GET /v1/metadata/{token}: no "+r.Method+" "+r.URL.Path)
	})
	return mux
}

func (a *Agent) serveMetadata(w http.ResponseWriter, r *http.Request) {
	md, ok := a.tasks.Metadata(r.PathValue("token"))
	if !ok {
		writeError(w, http.StatusNotFound, wire.CodeNotFound, "no task has this metadata token")
		return
	}
	writeJSON(w, http.StatusOK, md)
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
	runner, err := a.tasks.LogRunner(r.PathValue("namespace"), r.PathValue("name"), container)
	if err != nil {
		writeError(w, http.StatusNotFound, wire.CodeNotFound, err.Error())
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
	s := Self{
		Name: a.cfg.Name, Cluster: a.cfg.Cluster, Address: a.address, Session: a.Session(),
		Server: a.Server(), Leaving: a.tasks.Leaving(), Tasks: []SelfTask{},
	}
	for _, t := range a.tasks.Tasks() {
		s.Tasks = append(s.Tasks, SelfTask{Namespace: t.Namespace, Name: t.Name, UID: t.UID, Phase: t.Phase, Status: t.Status})
	}
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

// serveLeaves lists the leaf cache's leaves: ids, serials, dates, never a
// key.
func (a *Agent) serveLeaves(w http.ResponseWriter, _ *http.Request) {
	if a.leaves == nil {
		writeError(w, http.StatusNotFound, wire.CodeNotFound, "this agent runs no leaf cache")
		return
	}
	writeJSON(w, http.StatusOK, a.leaves.Leaves())
}
