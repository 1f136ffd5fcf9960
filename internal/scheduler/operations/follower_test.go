package operations_test

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler/schedulertest"
)

// laggingAPI is the resource API as a Raft follower serves it: writes and
// strong reads go to the leader, but a plain read or ListByOwner is served
// from the follower's own store, which may not have applied the newest
// writes yet. Here every resource written through it, or hidden, is
// missing from those local reads.
type laggingAPI struct {
	resource.API
	mu     sync.Mutex
	unseen map[string]bool // ids.String, without the uid
}

func (l *laggingAPI) hide(id *pbresource.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unseen[laggingKey(id)] = true
}

func (l *laggingAPI) hidden(id *pbresource.ID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unseen[laggingKey(id)]
}

func laggingKey(id *pbresource.ID) string {
	return ids.String(&pbresource.ID{Type: id.GetType(), Tenancy: id.GetTenancy(), Name: id.GetName()})
}

func (l *laggingAPI) Write(ctx context.Context, req *pbresource.WriteRequest) (*pbresource.WriteResponse, error) {
	out, err := l.API.Write(ctx, req)
	if err == nil {
		l.hide(out.GetResource().GetId())
	}
	return out, err
}

func (l *laggingAPI) WriteBatch(ctx context.Context, req *pbresource.WriteBatchRequest) (*pbresource.WriteBatchResponse, error) {
	out, err := l.API.WriteBatch(ctx, req)
	for _, r := range out.GetResources() {
		l.hide(r.GetId())
	}
	return out, err
}

func (l *laggingAPI) Read(ctx context.Context, req *pbresource.ReadRequest) (*pbresource.ReadResponse, error) {
	if !req.GetConsistent() && l.hidden(req.GetId()) {
		return nil, status.Errorf(codes.NotFound, "%s not applied on this follower yet", req.GetId().GetName())
	}
	return l.API.Read(ctx, req)
}

func (l *laggingAPI) ListByOwner(ctx context.Context, req *pbresource.ListByOwnerRequest) (*pbresource.ListByOwnerResponse, error) {
	out, err := l.API.ListByOwner(ctx, req)
	if err != nil {
		return nil, err
	}
	var kept []*pbresource.Resource
	for _, r := range out.GetResources() {
		if !l.hidden(r.GetId()) {
			kept = append(kept, r)
		}
	}
	return &pbresource.ListByOwnerResponse{Resources: kept}, nil
}

// TestOperationsOnALaggingFollower: a user registers a task definition,
// creates an environment and deploys it, each request served by a
// follower that has not applied the previous one yet. None may be told
// that what was just written does not exist (the fault test met "version
// ... is not a version of environment" on a 3-server cluster).
func TestOperationsOnALaggingFollower(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	lag := &laggingAPI{API: h.API, unseen: map[string]bool{}}
	h.Ops.API = lag
	td := h.TaskDefinition("ls", 1)
	lag.hide(orchestrator.TaskDefinitionID("default", "ls", 1))

	created, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("ls", td, 75, ""))
	if err != nil {
		t.Fatalf("creating an environment of a task definition just registered: %v", err)
	}
	if _, err := h.Ops.StartDeployment(h.Ctx, "default", "ls", ""); err != nil {
		t.Fatalf("deploying the version just created: %v", err)
	}
	if _, err := h.Ops.StartDeployment(h.Ctx, "default", "ls", created.Version); err != nil {
		t.Fatalf("deploying the version just created, by its uuid: %v", err)
	}
	if _, err := h.Ops.Diff(h.Ctx, "default", "ls", created.Version); err != nil {
		t.Fatalf("the diff of the version just created: %v", err)
	}
}
