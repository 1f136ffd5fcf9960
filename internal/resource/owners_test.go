package resource_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// TestCheckStatusOwner: a declared key is its owner's alone; an
// undeclared key is anyone's who may write the resource.
func TestCheckStatusOwner(t *testing.T) {
	reg := resource.Registration{Type: jobType, Statuses: map[string]resource.StatusPayload{
		"runner": {Owner: resource.StatusOwner{AgentOf: jobInstance}},
		"judge":  {Owner: resource.StatusOwner{Controller: "judge"}},
		"broken": {Owner: resource.StatusOwner{AgentOf: func(*pbresource.Resource) (string, error) { return "", errors.New("does not decode") }}},
	}}
	on := func(instance string) *pbresource.Resource {
		return &pbresource.Resource{Id: &pbresource.ID{Type: jobType, Name: "j"}, Data: anyOf(t, wrapperspb.String(instance))}
	}
	nobody := resource.StatusWriter{}
	judge := resource.StatusWriter{Controller: "judge"}
	other := resource.StatusWriter{Controller: "other"}
	agent1 := resource.StatusWriter{Agent: "i-1"}
	agent2 := resource.StatusWriter{Agent: "i-2"}
	for _, tc := range []struct {
		name   string
		w      resource.StatusWriter
		key    string
		stored *pbresource.Resource
		want   string // "" allowed, else a part of the refusal
	}{
		{"an undeclared key: a plain caller", nobody, "notes", on("i-1"), ""},
		{"an undeclared key: an agent", agent2, "notes", on("i-1"), ""},
		{"the controller's key: the controller", judge, "judge", on("i-1"), ""},
		{"the controller's key: a plain caller", nobody, "judge", on("i-1"), `owner, the servers' controller "judge"; a caller that is neither`},
		{"the controller's key: another controller", other, "judge", on("i-1"), `the controller "other" may not`},
		{"the controller's key: an agent", agent1, "judge", on("i-1"), "the agent of instance i-1 may not"},
		{"the controller's key, nothing stored: still refused", nobody, "judge", nil, `the servers' controller "judge"`},
		{"the agent's key: the agent of its instance", agent1, "runner", on("i-1"), ""},
		{"the agent's key: the agent of another instance", agent2, "runner", on("i-1"), "only by its owner, the agent of instance i-1; the agent of instance i-2 may not"},
		{"the agent's key: a plain caller", nobody, "runner", on("i-1"), "the agent of instance i-1; a caller that is neither"},
		{"the agent's key: a controller", judge, "runner", on("i-1"), `the agent of instance i-1; the controller "judge" may not`},
		{"the agent's key of a resource on no instance", agent1, "runner", on(""), "it is on none"},
		{"the agent's key when the instance cannot be told", agent1, "broken", on("i-1"), "cannot be told: does not decode"},
		{"the agent's key, nothing stored: not found follows", nobody, "runner", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := resource.CheckStatusOwner(tc.w, reg, tc.key, tc.stored)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			requireCode(t, err, codes.PermissionDenied, tc.want)
		})
	}
}

// TestStatusWriterOf: the markers are the context's, set in process.
func TestStatusWriterOf(t *testing.T) {
	ctx := context.Background()
	if w := resource.StatusWriterOf(ctx); w != (resource.StatusWriter{}) {
		t.Fatalf("a bare context says %+v", w)
	}
	if w := resource.StatusWriterOf(resource.AsAgent(resource.AsController(ctx, "c"), "i-1")); w != (resource.StatusWriter{Controller: "c", Agent: "i-1"}) {
		t.Fatalf("marked context says %+v", w)
	}
}

// TestForgedStatusWritesWriteNothing: the service refuses a declared key
// to anyone but its owner, one write or a batch, and stores nothing of
// the request; an undeclared key stays open to the resource's writers.
func TestForgedStatusWritesWriteNothing(t *testing.T) {
	h := newHarness(t)
	plain := context.Background()
	w := h.write(widget(t, "", "w", "v"))
	job := h.write(&pbresource.Resource{Id: &pbresource.ID{Type: jobType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: "j"}, Data: anyOf(t, wrapperspb.String("i-1"))})
	runner := func(v int64) *pbresource.WriteStatusRequest {
		return &pbresource.WriteStatusRequest{Id: job.GetId(), Key: "runner", Status: &pbresource.Status{Data: anyOf(t, wrapperspb.Int64(v))}}
	}
	g := h.write(gizmo(t, "", "g"))
	notes := &pbresource.WriteStatusRequest{Id: g.GetId(), Key: "notes", Status: &pbresource.Status{Conditions: []*pbresource.Condition{{Type: "Seen", State: pbresource.State_STATE_TRUE}}}}

	unchanged := func() {
		t.Helper()
		for _, r := range []*pbresource.Resource{w, job, g} {
			if got := h.stored(r.GetId()); len(got.GetStatus()) != 0 || got.GetVersion() != r.GetVersion() {
				t.Fatalf("%s changed: %v", r.GetId().GetName(), got.GetStatus())
			}
		}
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		req  *pbresource.WriteStatusRequest
		want string
	}{
		{"the controller's key, by a plain caller", plain, progress(t, w.GetId(), "", 1), `the servers' controller "progress-reporter"`},
		{"the controller's key, by an agent", resource.AsAgent(plain, "i-1"), progress(t, w.GetId(), "", 1), "the agent of instance i-1 may not"},
		{"the agent's key, by a plain caller", plain, runner(1), "the agent of instance i-1; a caller that is neither"},
		{"the agent's key, by another instance's agent", resource.AsAgent(plain, "i-2"), runner(1), "the agent of instance i-2 may not"},
		{"the agent's key, by a controller", h.ctx, runner(1), `the controller "progress-reporter" may not`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.svc.WriteStatus(tc.ctx, tc.req)
			requireCode(t, err, codes.PermissionDenied, tc.want)
			unchanged()
			// In a batch, after a member that alone would be written: the
			// whole request is refused, naming the member, and writes
			// nothing.
			_, err = h.svc.WriteStatuses(tc.ctx, &pbresource.WriteStatusesRequest{Statuses: []*pbresource.WriteStatusRequest{notes, tc.req}})
			requireCode(t, err, codes.PermissionDenied, "statuses[1]: ", tc.want)
			unchanged()
		})
	}

	// The owners write; an undeclared key is written by a plain caller.
	if _, err := h.svc.WriteStatus(resource.AsAgent(plain, "i-1"), runner(3)); err != nil {
		t.Fatalf("the agent of i-1: %v", err)
	}
	if _, err := h.svc.WriteStatus(h.ctx, progress(t, w.GetId(), "", 2)); err != nil {
		t.Fatalf("the controller: %v", err)
	}
	if _, err := h.svc.WriteStatus(plain, notes); err != nil {
		t.Fatalf("an undeclared key: %v", err)
	}
	// A job that is gone: the agent's key fails as not found, not as
	// forbidden (nothing would be written either way).
	gone := runner(1)
	gone.Id = &pbresource.ID{Type: jobType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: "gone"}
	_, err := h.svc.WriteStatus(resource.AsAgent(plain, "i-1"), gone)
	requireCode(t, err, codes.NotFound)
}

// Among agents, only the agent a type names writes a resource of it;
// callers that are no agent, and resources that are no agent's, are left
// to the ACLs.
func TestCheckAgentWrite(t *testing.T) {
	onInstance := func(res *pbresource.Resource) (string, error) { return res.GetMetadata()["on"], nil }
	reg := resource.Registration{Type: &pbresource.Type{Group: "g", GroupVersion: "v1", Kind: "K"}, AgentWritten: onInstance}
	res := func(on string) *pbresource.Resource {
		return &pbresource.Resource{Id: &pbresource.ID{Type: reg.Type, Name: "r"}, Metadata: map[string]string{"on": on}}
	}
	for _, tc := range []struct {
		name   string
		reg    resource.Registration
		writer resource.StatusWriter
		res    *pbresource.Resource
		denied bool
	}{
		{"its agent", reg, resource.StatusWriter{Agent: "i-1"}, res("i-1"), false},
		{"another agent", reg, resource.StatusWriter{Agent: "i-2"}, res("i-1"), true},
		{"no agent", reg, resource.StatusWriter{}, res("i-1"), false},
		{"a controller", reg, resource.StatusWriter{Controller: "c"}, res("i-1"), false},
		{"a resource on no instance", reg, resource.StatusWriter{Agent: "i-2"}, res(""), false},
		{"a type that names no agent", resource.Registration{Type: reg.Type}, resource.StatusWriter{Agent: "i-2"}, res("i-1"), false},
	} {
		err := resource.CheckAgentWrite(tc.writer, tc.reg, tc.res)
		if got := grpcstatus.Code(err) == codes.PermissionDenied; got != tc.denied || (!tc.denied && err != nil) {
			t.Errorf("%s: %v, want denied %v", tc.name, err, tc.denied)
		}
	}
}
