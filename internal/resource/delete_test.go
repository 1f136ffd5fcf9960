package resource_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// A type written only through its own operations is deleted only through
// them: the generic Delete refuses it, naming the operation to use (or
// the refusal DeleteRefusal gives the stored resource), whether the
// resource is stored or not, with or without a version or uid, and
// deletes nothing; a call FromOperations deletes it.
func TestDeletedThroughOperationsOnly(t *testing.T) {
	var (
		opsOnly  = &pbresource.Type{Group: "demo", GroupVersion: "v1", Kind: "OpsOnly"}
		worded   = &pbresource.Type{Group: "demo", GroupVersion: "v1", Kind: "Worded"}
		refining = &pbresource.Type{Group: "demo", GroupVersion: "v1", Kind: "Refining"}
	)
	h := newHarness(t)
	reg := resource.NewRegistry()
	registerTestTypes(reg)
	reg.Register(resource.Registration{Type: opsOnly, Proto: &wrapperspb.StringValue{}, Scope: resource.ScopeNamespace, WrittenThrough: "/v1/ops-only"})
	reg.Register(resource.Registration{Type: worded, Proto: &wrapperspb.StringValue{}, Scope: resource.ScopeNamespace,
		WrittenThrough: "/v1/worded", DeletedThrough: "use DELETE /v1/worded/{name} (demo worded delete)"})
	// Refining says more of the resource whose value is "active", and
	// keeps the usual refusal for the others.
	reg.Register(resource.Registration{Type: refining, Proto: &wrapperspb.StringValue{}, Scope: resource.ScopeCluster,
		WrittenThrough: "/v1/refining", DeletedThrough: "its manager prunes it",
		DeleteRefusal: func(stored *pbresource.Resource) error {
			v, err := resource.DecodeData[*wrapperspb.StringValue](stored)
			if err != nil || v.GetValue() != "active" {
				return nil
			}
			return status.Error(codes.FailedPrecondition, "the active one is rotated, never deleted")
		}})
	svc := resource.NewService(resource.Config{Backend: h.backend, Registry: reg})
	ops := resource.FromOperations(h.ctx)
	store := func(typ *pbresource.Type, name, value string) *pbresource.Resource {
		t.Helper()
		out, err := svc.Write(ops, &pbresource.WriteRequest{Resource: &pbresource.Resource{
			Id: &pbresource.ID{Type: typ, Name: name}, Data: anyOf(t, wrapperspb.String(value))}})
		if err != nil {
			t.Fatal(err)
		}
		return out.GetResource()
	}
	a := store(opsOnly, "a", "x")
	w := store(worded, "w", "x")
	active := store(refining, "active", "active")
	old := store(refining, "old", "rotated-out")

	before := h.state()
	for _, tc := range []struct {
		name string
		req  *pbresource.DeleteRequest
		want string
	}{
		{"stored", &pbresource.DeleteRequest{Id: a.GetId()}, "demo/v1/OpsOnly is deleted only through its own operations, which check and tear down what the generic delete cannot: /v1/ops-only"},
		{"at its version", &pbresource.DeleteRequest{Id: a.GetId(), Version: a.GetVersion()}, "/v1/ops-only"},
		{"by name", &pbresource.DeleteRequest{Id: &pbresource.ID{Type: opsOnly, Name: "a"}}, "/v1/ops-only"},
		{"not stored", &pbresource.DeleteRequest{Id: &pbresource.ID{Type: opsOnly, Name: "nothing"}}, "/v1/ops-only"},
		{"another incarnation", &pbresource.DeleteRequest{Id: &pbresource.ID{Type: opsOnly, Name: "a", Uid: "01AAAAAAAAAAAAAAAAAAAAAAAA"}}, "/v1/ops-only"},
		{"named operation", &pbresource.DeleteRequest{Id: w.GetId()}, "demo/v1/Worded is deleted only through its own operations, which check and tear down what the generic delete cannot: use DELETE /v1/worded/{name} (demo worded delete)"},
		{"refined", &pbresource.DeleteRequest{Id: active.GetId()}, "the active one is rotated, never deleted"},
		{"refined by name", &pbresource.DeleteRequest{Id: &pbresource.ID{Type: refining, Name: "active"}, Version: active.GetVersion()}, "the active one is rotated"},
		{"not refined", &pbresource.DeleteRequest{Id: old.GetId()}, "demo/v1/Refining is deleted only through its own operations, which check and tear down what the generic delete cannot: its manager prunes it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := svc.Delete(h.ctx, tc.req)
			requireCode(t, err, codes.FailedPrecondition, tc.want)
		})
	}
	h.requireUnchanged(before)

	// The operations delete them all, the active one included: DeleteRefusal
	// words a refusal, it never refuses a call FromOperations.
	for _, r := range []*pbresource.Resource{a, w, active, old} {
		if _, err := svc.Delete(ops, &pbresource.DeleteRequest{Id: r.GetId(), Version: r.GetVersion()}); err != nil {
			t.Fatalf("delete %s FromOperations: %v", r.GetId().GetName(), err)
		}
		if h.stored(r.GetId()) != nil {
			t.Fatalf("%s is still stored after its operations deleted it", r.GetId().GetName())
		}
	}
}

// DeletedThroughOperations names the types the generic Delete refuses
// whole: written through their operations, sealed or permanent.
func TestRegistrationDeletedThroughOperations(t *testing.T) {
	for _, tc := range []struct {
		reg  resource.Registration
		want bool
	}{
		{resource.Registration{}, false},
		{resource.Registration{Immutable: true}, false},
		{resource.Registration{WrittenThrough: "/v1/x"}, true},
		{resource.Registration{Sealed: true}, true},
		{resource.Registration{Permanent: true}, true},
	} {
		if got := tc.reg.DeletedThroughOperations(); got != tc.want {
			t.Errorf("%+v: DeletedThroughOperations() = %v, want %v", tc.reg, got, tc.want)
		}
	}
}
