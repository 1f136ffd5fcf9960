package httpapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/httpapi/wire"
)

// Operator is what the operator endpoints need from the cluster: its Raft
// configuration, removing a server from it, and saving and restoring the
// whole state. Its errors should be gRPC status errors, like the resource
// API's. A server without one (in memory) answers these paths with 501.
type Operator interface {
	RaftPeers() ([]wire.RaftPeer, error)
	RemovePeer(ctx context.Context, idOrAddr string) (string, error)
	Snapshot(ctx context.Context, w io.Writer) error
	Restore(ctx context.Context, r io.Reader) error
}

// MaxSnapshotBytes bounds a snapshot upload.
const MaxSnapshotBytes = 8 << 30

// The operator routes act on the whole cluster. Saving a snapshot reveals
// every resource of every namespace, so it needs operator:write, as
// restoring it does.
func (h *Handler) operatorRoutes() {
	h.handle("GET /v1/operator/raft/peers", acl.OperatorRead, h.raftPeers)
	h.handle("DELETE /v1/operator/raft/peers/{peer}", acl.OperatorWrite, h.removePeer)
	h.handle("GET /v1/snapshot", acl.OperatorWrite, h.saveSnapshot)
	h.handle("PUT /v1/snapshot", acl.OperatorWrite, h.restoreSnapshot)
	h.handle("/v1/snapshot", acl.Public, MethodNotAllowed("GET, PUT"))
}

func (h *Handler) operator() (Operator, error) {
	if h.op == nil {
		return nil, status.Error(codes.Unimplemented, "this server keeps its state in memory, without Raft: start it with -data-dir for clustering and snapshots")
	}
	return h.op, nil
}

func (h *Handler) raftPeers(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r.URL.Query()); err != nil {
		return err
	}
	op, err := h.operator()
	if err != nil {
		return err
	}
	peers, err := op.RaftPeers()
	if err != nil {
		return err
	}
	if peers == nil {
		peers = []wire.RaftPeer{}
	}
	writeJSON(w, http.StatusOK, peers)
	return nil
}

func (h *Handler) removePeer(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r.URL.Query()); err != nil {
		return err
	}
	op, err := h.operator()
	if err != nil {
		return err
	}
	id, err := op.RemovePeer(r.Context(), r.PathValue("peer"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.RemovedPeer{Removed: id})
	return nil
}

// saveSnapshot writes the snapshot to a temporary file first, so that a
// failure is reported as an error response instead of a truncated body.
func (h *Handler) saveSnapshot(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r.URL.Query()); err != nil {
		return err
	}
	op, err := h.operator()
	if err != nil {
		return err
	}
	f, err := os.CreateTemp("", "trellis-snapshot-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := op.Snapshot(r.Context(), f); err != nil {
		return err
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, f); err != nil {
		return fmt.Errorf("sending the snapshot: %w", err)
	}
	return nil
}

func (h *Handler) restoreSnapshot(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r.URL.Query()); err != nil {
		return err
	}
	op, err := h.operator()
	if err != nil {
		return err
	}
	body := http.MaxBytesReader(w, r.Body, MaxSnapshotBytes)
	if err := op.Restore(r.Context(), body); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "restored"})
	return nil
}
