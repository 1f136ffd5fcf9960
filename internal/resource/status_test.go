package resource_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

func TestWriteStatus(t *testing.T) {
	h := newHarness(t)
	h.write(widget(t, "", "web", "v1"))
	res := h.write(widget(t, "", "web", "v2")) // generation 2

	cond := &pbresource.Condition{Type: "Ready", State: pbresource.State_STATE_TRUE, Reason: "Placed", Message: "on 3 instances", Resource: widgetID("", "web")}
	out, err := h.svc.WriteStatus(h.ctx, &pbresource.WriteStatusRequest{
		Id: res.GetId(), Key: "trellis.dev/scheduler",
		Status: &pbresource.Status{ObservedGeneration: 2, Conditions: []*pbresource.Condition{cond}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := out.GetResource()
	if got.GetGeneration() != 2 || got.GetVersion() == res.GetVersion() {
		t.Fatalf("status write: generation %d (want 2), version %s (was %s)", got.GetGeneration(), got.GetVersion(), res.GetVersion())
	}
	if !proto.Equal(got.GetData(), res.GetData()) || got.GetId().GetUid() != res.GetId().GetUid() {
		t.Fatal("status write changed data or uid")
	}

	// A second key keeps the first.
	out2, err := h.svc.WriteStatus(h.ctx, &pbresource.WriteStatusRequest{Id: res.GetId(), Key: "health", Status: &pbresource.Status{ObservedGeneration: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out2.GetResource().GetStatus()) != 2 {
		t.Fatalf("status %v, want two keys", out2.GetResource().GetStatus())
	}

	// The same status again writes nothing.
	before := h.state()
	again, err := h.svc.WriteStatus(h.ctx, &pbresource.WriteStatusRequest{Id: res.GetId(), Key: "health", Status: &pbresource.Status{ObservedGeneration: 1}})
	if err != nil || again.GetResource().GetVersion() != out2.GetResource().GetVersion() {
		t.Fatalf("identical status: %v, %v", again, err)
	}
	h.requireUnchanged(before)

	// With the current version: a CAS that succeeds.
	cas, err := h.svc.WriteStatus(h.ctx, &pbresource.WriteStatusRequest{Id: res.GetId(), Version: out2.GetResource().GetVersion(), Key: "health", Status: &pbresource.Status{ObservedGeneration: 2}})
	if err != nil {
		t.Fatal(err)
	}
	current := cas.GetResource()

	longMsg := strings.Repeat("m", 32<<10+1)
	cases := []struct {
		name string
		req  *pbresource.WriteStatusRequest
		code codes.Code
		want []string
	}{
		{"no id", &pbresource.WriteStatusRequest{Key: "k", Status: &pbresource.Status{}}, codes.InvalidArgument, []string{"id: is required"}},
		{"bad name", &pbresource.WriteStatusRequest{Id: widgetID("", "Web"), Key: "k", Status: &pbresource.Status{}}, codes.InvalidArgument, []string{`id.name: "Web" is not a valid name`}},
		{"no key", &pbresource.WriteStatusRequest{Id: res.GetId(), Status: &pbresource.Status{}}, codes.InvalidArgument, []string{"key: is required"}},
		{"bad key", &pbresource.WriteStatusRequest{Id: res.GetId(), Key: "my controller", Status: &pbresource.Status{}}, codes.InvalidArgument, []string{`key: "my controller" is not valid`}},
		{"no status", &pbresource.WriteStatusRequest{Id: res.GetId(), Key: "k"}, codes.InvalidArgument, []string{"status: is required"}},
		{"ahead of generation", &pbresource.WriteStatusRequest{Id: res.GetId(), Key: "k", Status: &pbresource.Status{ObservedGeneration: 3}}, codes.InvalidArgument, []string{"status.observed_generation: 3 is ahead of the resource's generation 2"}},
		{"condition without type", &pbresource.WriteStatusRequest{Id: res.GetId(), Key: "k", Status: &pbresource.Status{Conditions: []*pbresource.Condition{{State: pbresource.State_STATE_TRUE}}}}, codes.InvalidArgument, []string{"status.conditions[0].type: is required"}},
		{"unknown state", &pbresource.WriteStatusRequest{Id: res.GetId(), Key: "k", Status: &pbresource.Status{Conditions: []*pbresource.Condition{{Type: "Ready", State: 7}}}}, codes.InvalidArgument, []string{"status.conditions[0].state: 7 is not a known state"}},
		{"long message", &pbresource.WriteStatusRequest{Id: res.GetId(), Key: "k", Status: &pbresource.Status{Conditions: []*pbresource.Condition{{Type: "Ready", Message: longMsg}}}}, codes.InvalidArgument, []string{"status.conditions[0].message: must be valid UTF-8 of at most 32768 bytes"}},
		{"condition resource of unknown type", &pbresource.WriteStatusRequest{Id: res.GetId(), Key: "k", Status: &pbresource.Status{Conditions: []*pbresource.Condition{{Type: "Ready", Resource: &pbresource.ID{Type: &pbresource.Type{Group: "a", GroupVersion: "b", Kind: "C"}, Name: "x"}}}}}, codes.InvalidArgument, []string{"status.conditions[0].resource.type: unknown resource type"}},
		{"stale version", &pbresource.WriteStatusRequest{Id: res.GetId(), Version: res.GetVersion(), Key: "k", Status: &pbresource.Status{}}, codes.Aborted, []string{"version: conflict", "not " + res.GetVersion()}},
		{"wrong uid", &pbresource.WriteStatusRequest{Id: &pbresource.ID{Type: widgetType, Name: "web", Uid: "01ARZ3NDEKTSV4RRFFQ69G5FAV"}, Key: "k", Status: &pbresource.Status{}}, codes.Aborted, []string{"id.uid", "deleted and re-created"}},
		{"not found", &pbresource.WriteStatusRequest{Id: widgetID("", "nope"), Key: "k", Status: &pbresource.Status{}}, codes.NotFound, []string{"demo/v1/Widget/default/nope: resource not found"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h.state()
			_, err := h.svc.WriteStatus(h.ctx, c.req)
			requireCode(t, err, c.code, c.want...)
			h.requireUnchanged(before)
		})
	}
	if !proto.Equal(h.stored(res.GetId()), current) {
		t.Fatal("refused status writes changed the resource")
	}
}

// TestWriteStatusPayload: a key's typed payload is checked against the
// type's declaration and its hook, stored in canonical encoding, and kept
// by writes of the data, which move the generation while status writes
// do not.
func TestWriteStatusPayload(t *testing.T) {
	h := newHarness(t)
	res := h.write(widget(t, "", "web", "v1"))
	payload := func(v int64) *pbresource.Status {
		return &pbresource.Status{ObservedGeneration: 1, Data: anyOf(t, wrapperspb.Int64(v))}
	}
	out, err := h.svc.WriteStatus(h.ctx, &pbresource.WriteStatusRequest{Id: res.GetId(), Key: "progress", Status: payload(7)})
	if err != nil {
		t.Fatal(err)
	}
	got := &wrapperspb.Int64Value{}
	if err := out.GetResource().GetStatus()["progress"].GetData().UnmarshalTo(got); err != nil || got.GetValue() != 7 {
		t.Fatalf("stored payload %v (%v), want 7", got, err)
	}
	if out.GetResource().GetGeneration() != 1 {
		t.Fatalf("a status write moved the generation to %d", out.GetResource().GetGeneration())
	}

	// A payload encoded another way (a different type URL prefix) is the
	// same payload: nothing is written.
	before := h.state()
	other := payload(7)
	other.Data.TypeUrl = "example.com/google.protobuf.Int64Value"
	if _, err := h.svc.WriteStatus(h.ctx, &pbresource.WriteStatusRequest{Id: res.GetId(), Key: "progress", Status: other}); err != nil {
		t.Fatal(err)
	}
	h.requireUnchanged(before)

	// A change of the data moves the generation and keeps the payload.
	upd := h.write(widget(t, "", "web", "v2"))
	if upd.GetGeneration() != 2 || !proto.Equal(upd.GetStatus()["progress"], out.GetResource().GetStatus()["progress"]) {
		t.Fatalf("data write: generation %d, status %v", upd.GetGeneration(), upd.GetStatus())
	}

	cases := []struct {
		name string
		key  string
		st   *pbresource.Status
		want string
	}{
		{"undeclared key", "health", payload(1), `status.data: status key "health" of demo/v1/Widget takes no data (it declares data for progress)`},
		{"wrong message", "progress", &pbresource.Status{Data: anyOf(t, wrapperspb.String("7"))}, `status.data: has type "type.googleapis.com/google.protobuf.StringValue"; status key "progress" of demo/v1/Widget takes a google.protobuf.Int64Value`},
		{"does not decode", "progress", &pbresource.Status{Data: &anypb.Any{TypeUrl: "type.googleapis.com/google.protobuf.Int64Value", Value: []byte{0xff}}}, "status.data: does not decode as google.protobuf.Int64Value"},
		{"hook refuses", "progress", payload(-1), "status.data.value: must not be negative (got -1)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h.state()
			_, err := h.svc.WriteStatus(h.ctx, &pbresource.WriteStatusRequest{Id: res.GetId(), Key: c.key, Status: c.st})
			requireCode(t, err, codes.InvalidArgument, c.want)
			h.requireUnchanged(before)
		})
	}

	// A type that declares nothing takes no data under any key.
	g := h.write(gizmo(t, "", "g"))
	_, err = h.svc.WriteStatus(h.ctx, &pbresource.WriteStatusRequest{Id: g.GetId(), Key: "progress", Status: payload(1)})
	requireCode(t, err, codes.InvalidArgument, `status.data: status key "progress" of demo/v1/Gizmo takes no data (it declares no status data)`)
}

// TestRegisterRefusesBadStatusDeclarations: a status key must be a valid
// key and name its message.
func TestRegisterRefusesBadStatusDeclarations(t *testing.T) {
	for name, decl := range map[string]map[string]resource.StatusPayload{
		"no proto":   {"progress": {Owner: resource.StatusOwner{Controller: "c"}}},
		"bad key":    {"my key": {Owner: resource.StatusOwner{Controller: "c"}, Proto: &wrapperspb.Int64Value{}}},
		"no owner":   {"progress": {Proto: &wrapperspb.Int64Value{}}},
		"two owners": {"progress": {Owner: resource.StatusOwner{Controller: "c", AgentOf: func(*pbresource.Resource) (string, error) { return "", nil }}, Proto: &wrapperspb.Int64Value{}}},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("Register accepted the declaration")
				}
			}()
			resource.NewRegistry().Register(resource.Registration{Type: gizmoType, Proto: &wrapperspb.BoolValue{}, Statuses: decl})
		})
	}
}
