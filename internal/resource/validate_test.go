package resource

import (
	"errors"
	"strings"
	"testing"
	"trellis.dev/trellis/internal/acl"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

var (
	widgetType = &pbresource.Type{Group: "demo", GroupVersion: "v1", Kind: "Widget"}
	gadgetType = &pbresource.Type{Group: "demo", GroupVersion: "v1", Kind: "Gadget"}
)

func testRegistry() *Registry {
	r := NewRegistry()
	r.Register(Registration{Type: widgetType, Proto: &wrapperspb.StringValue{}, Scope: ScopeNamespace})
	r.Register(Registration{Type: gadgetType, Proto: &wrapperspb.Int64Value{}, Scope: ScopeCluster})
	return r
}

func TestIsDNSLabel(t *testing.T) {
	cases := []struct {
		in   string
		want bool
	}{
		{"a", true},
		{"web-1", true},
		{"0abc", true},
		{"abc0", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"", false},
		{"Foo", false},
		{"foo_1", false},
		{"-foo", false},
		{"foo-", false},
		{"foo.bar", false},
		{"foo bar", false},
		{"fóo", false},
		{"*", false},
	}
	for _, c := range cases {
		if got := IsDNSLabel(c.in); got != c.want {
			t.Errorf("IsDNSLabel(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestValidateNameMessage(t *testing.T) {
	err := ValidateName("id.name", "Foo_1")
	want := `id.name: "Foo_1" is not a valid name: must be a lowercase DNS label (a-z, 0-9, '-', at most 63 characters)`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
	if err := ValidateName("id.name", ""); err == nil || err.Error() != "id.name: is required" {
		t.Fatalf("empty name: got %v", err)
	}
}

func TestIsQualifiedName(t *testing.T) {
	cases := []struct {
		in   string
		want bool
	}{
		{"app", true},
		{"App.Name_2", true},
		{"trellis.dev/env", true},
		{"a.b.c/x-y", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"", false},
		{"/app", false},
		{"trellis.dev/", false},
		{"Trellis.dev/app", false},
		{"a/b/c", false},
		{"-app", false},
		{"app.", false},
		{"app name", false},
		{strings.Repeat("a", 254) + "/x", false},
	}
	for _, c := range cases {
		if got := isQualifiedName(c.in); got != c.want {
			t.Errorf("isQualifiedName(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestCheckMetadata(t *testing.T) {
	many := map[string]string{}
	for i := range MaxMetadataEntries + 1 {
		many["k"+strings.Repeat("x", i%50)+string(rune('a'+i%26))+strings.Repeat("y", i/26)] = "v"
	}
	cases := []struct {
		name    string
		md      map[string]string
		wantErr string
	}{
		{"nil", nil, ""},
		{"good", map[string]string{"app": "web", "trellis.dev/tier": "front end, with spaces"}, ""},
		{"bad key", map[string]string{"app": "x", "bad key": "v"}, `metadata["bad key"]: key is not valid`},
		{"long value", map[string]string{"app": strings.Repeat("v", MaxMetadataValueLength+1)}, `metadata["app"]: value is 4097 bytes long, over the limit of 4096`},
		{"invalid utf8", map[string]string{"app": "\xff"}, `metadata["app"]: value is not valid UTF-8`},
		{"too many", many, "metadata: has 129 entries, over the limit of 128"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkMetadata(c.md)
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("got %v, want %q", err, c.wantErr)
			}
		})
	}
}

func TestCheckID(t *testing.T) {
	r := testRegistry()
	cases := []struct {
		name   string
		id     *pbresource.ID
		wantNS string
		errSub string
	}{
		{"namespaced default", &pbresource.ID{Type: widgetType, Name: "w"}, "default", ""},
		{"namespaced given", &pbresource.ID{Type: widgetType, Name: "w", Tenancy: &pbresource.Tenancy{Namespace: "team-a"}}, "team-a", ""},
		{"cluster", &pbresource.ID{Type: gadgetType, Name: "g"}, "", ""},
		{"nil", nil, "", "id: is required"},
		{"no type", &pbresource.ID{Name: "w"}, "", "id.type: is required"},
		{"partial type", &pbresource.ID{Type: &pbresource.Type{Group: "demo"}, Name: "w"}, "", "id.type: must name a group, group_version and kind"},
		{"unknown type", &pbresource.ID{Type: &pbresource.Type{Group: "demo", GroupVersion: "v1", Kind: "Nope"}, Name: "w"}, "", `id.type: unknown resource type "demo/v1/Nope"`},
		{"no name", &pbresource.ID{Type: widgetType}, "", "id.name: is required"},
		{"bad name", &pbresource.ID{Type: widgetType, Name: "Foo_1"}, "", `id.name: "Foo_1" is not a valid name`},
		{"bad namespace", &pbresource.ID{Type: widgetType, Name: "w", Tenancy: &pbresource.Tenancy{Namespace: "Team"}}, "", `id.tenancy.namespace: "Team" is not a valid namespace`},
		{"wildcard namespace", &pbresource.ID{Type: widgetType, Name: "w", Tenancy: &pbresource.Tenancy{Namespace: "*"}}, "", `id.tenancy.namespace: "*" is not a valid namespace`},
		{"cluster with namespace", &pbresource.ID{Type: gadgetType, Name: "g", Tenancy: &pbresource.Tenancy{Namespace: "default"}}, "", "id.tenancy.namespace: must be empty: demo/v1/Gadget is cluster-scoped"},
		{"long uid", &pbresource.ID{Type: gadgetType, Name: "g", Uid: strings.Repeat("u", 65)}, "", "id.uid: is 65 characters long"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, _, err := r.checkID("id", c.id)
			if c.errSub != "" {
				var fe *FieldError
				if err == nil || !errors.As(err, &fe) || !strings.Contains(err.Error(), c.errSub) {
					t.Fatalf("got %v, want a FieldError containing %q", err, c.errSub)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := id.GetTenancy().GetNamespace(); got != c.wantNS {
				t.Fatalf("namespace %q, want %q", got, c.wantNS)
			}
		})
	}
}

func TestCheckListQuery(t *testing.T) {
	r := testRegistry()
	cases := []struct {
		name    string
		typ     *pbresource.Type
		ns      string
		prefix  string
		wantNS  string
		wantErr string
	}{
		{"default", widgetType, "", "", "default", ""},
		{"wildcard", widgetType, "*", "we", "*", ""},
		{"cluster", gadgetType, "", "", "", ""},
		{"cluster wildcard", gadgetType, "*", "", "*", ""},
		{"cluster with namespace", gadgetType, "x", "", "", "tenancy.namespace: must be empty"},
		{"unknown", &pbresource.Type{Group: "a", GroupVersion: "b", Kind: "C"}, "", "", "", `type: unknown resource type "a/b/C"`},
		{"bad prefix", widgetType, "", "Web", "", `name_prefix: "Web" cannot begin any valid name`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, ten, err := r.checkListQuery(c.typ, &pbresource.Tenancy{Namespace: c.ns}, c.prefix)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || ten.GetNamespace() != c.wantNS {
				t.Fatalf("got %v, %v; want namespace %q", ten, err, c.wantNS)
			}
		})
	}
}

func widgetCandidate(t *testing.T, value string, md map[string]string) *candidate {
	t.Helper()
	data, err := anypb.New(wrapperspb.String(value))
	if err != nil {
		t.Fatal(err)
	}
	return &candidate{
		reg:  Registration{Type: widgetType, Proto: &wrapperspb.StringValue{}},
		res:  &pbresource.Resource{Id: &pbresource.ID{Type: widgetType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: "w"}, Metadata: md, Data: data},
		data: wrapperspb.String(value),
	}
}

func TestPlanWrite(t *testing.T) {
	newUID := func() (string, error) { return "NEWUID", nil }
	base := widgetCandidate(t, "v1", map[string]string{"app": "web"})
	stored := &pbresource.Resource{
		Id:         &pbresource.ID{Type: widgetType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: "w", Uid: "OLDUID"},
		Version:    "7",
		Generation: 3,
		Metadata:   map[string]string{"app": "web"},
		Data:       base.res.Data,
		Status:     map[string]*pbresource.Status{"ctrl": {ObservedGeneration: 3}},
	}
	owner := &pbresource.ID{Type: gadgetType, Tenancy: &pbresource.Tenancy{}, Name: "g", Uid: "OWNER"}

	t.Run("create", func(t *testing.T) {
		p, err := planWrite(base, nil, newUID)
		if err != nil {
			t.Fatal(err)
		}
		w := p.write
		if w.GetId().GetUid() != "NEWUID" || w.GetGeneration() != 1 || w.GetVersion() != "" || len(w.GetStatus()) != 0 {
			t.Fatalf("create planned %v", w)
		}
	})
	t.Run("identical is a no-op", func(t *testing.T) {
		p, err := planWrite(base, stored, newUID)
		if err != nil || p.write != nil || p.stored != stored {
			t.Fatalf("got %+v, %v; want the stored resource and no write", p, err)
		}
	})
	t.Run("identical with nil vs empty metadata", func(t *testing.T) {
		c := widgetCandidate(t, "v1", map[string]string{})
		s := &pbresource.Resource{Id: stored.Id, Version: "7", Data: stored.Data}
		if p, err := planWrite(c, s, newUID); err != nil || p.write != nil {
			t.Fatalf("got %+v, %v; want a no-op", p, err)
		}
	})
	t.Run("data change", func(t *testing.T) {
		p, err := planWrite(widgetCandidate(t, "v2", map[string]string{"app": "web"}), stored, newUID)
		if err != nil {
			t.Fatal(err)
		}
		w := p.write
		if w.GetGeneration() != 4 || w.GetVersion() != "7" || w.GetId().GetUid() != "OLDUID" || w.GetStatus()["ctrl"].GetObservedGeneration() != 3 {
			t.Fatalf("update planned %v", w)
		}
	})
	t.Run("metadata change", func(t *testing.T) {
		p, err := planWrite(widgetCandidate(t, "v1", map[string]string{"app": "api"}), stored, newUID)
		if err != nil || p.write.GetGeneration() != 4 {
			t.Fatalf("got %v, %v", p.write, err)
		}
	})
	cases := []struct {
		name   string
		edit   func(c *candidate)
		stored *pbresource.Resource
		code   codes.Code
		sub    string
	}{
		{"stale version", func(c *candidate) { c.res.Version = "6" }, stored, codes.Aborted, "version: conflict: demo/v1/Widget/default/w is at version 7, not 6; re-read it and retry"},
		{"version of nothing", func(c *candidate) { c.res.Version = "6" }, nil, codes.Aborted, "does not exist"},
		{"wrong uid", func(c *candidate) { c.res.Id.Uid = "OTHER" }, stored, codes.Aborted, "id.uid: demo/v1/Widget/default/w now has uid OLDUID, not OTHER: it was deleted and re-created"},
		{"uid of nothing", func(c *candidate) { c.res.Id.Uid = "OTHER" }, nil, codes.Aborted, "id.uid: demo/v1/Widget/default/w with uid OTHER no longer exists"},
		{"owner added", func(c *candidate) { c.res.Owner = owner }, stored, codes.InvalidArgument, "owner: cannot change once demo/v1/Widget/default/w is created (stored owner: none)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cand := widgetCandidate(t, "v1", map[string]string{"app": "web"})
			c.edit(cand)
			_, err := planWrite(cand, c.stored, newUID)
			var fe *FieldError
			code := status.Code(err)
			if errors.As(err, &fe) {
				code = codes.InvalidArgument
			}
			if code != c.code || err == nil || !strings.Contains(err.Error(), c.sub) {
				t.Fatalf("got %v (%v), want %v containing %q", err, code, c.code, c.sub)
			}
		})
	}
	t.Run("immutable", func(t *testing.T) {
		changed := widgetCandidate(t, "v2", map[string]string{"app": "web"})
		changed.reg.Immutable = true
		if _, err := planWrite(changed, stored, newUID); err == nil || !strings.Contains(err.Error(), "data: cannot change: demo/v1/Widget/default/w is immutable") {
			t.Fatalf("data change of an immutable type: got %v", err)
		}
		relabelled := widgetCandidate(t, "v1", map[string]string{"app": "api"})
		relabelled.reg.Immutable = true
		if p, err := planWrite(relabelled, stored, newUID); err != nil || p.write.GetGeneration() != 4 {
			t.Fatalf("metadata change of an immutable type: got %v, %v", p.write, err)
		}
		same := widgetCandidate(t, "v1", map[string]string{"app": "web"})
		same.reg.Immutable = true
		if p, err := planWrite(same, stored, newUID); err != nil || p.write != nil {
			t.Fatalf("identical write of an immutable type: got %+v, %v", p, err)
		}
	})
	t.Run("validate update", func(t *testing.T) {
		changed := widgetCandidate(t, "v2", map[string]string{"app": "web"})
		var gotStored, gotNext *pbresource.Resource
		changed.reg.ValidateUpdate = func(stored, next *pbresource.Resource) error {
			gotStored, gotNext = stored, next
			return NewFieldError("data.value", "cannot go from v1 to v2")
		}
		if _, err := planWrite(changed, stored, newUID); err == nil || err.Error() != "data.value: cannot go from v1 to v2" {
			t.Fatalf("got %v", err)
		}
		if gotStored != stored || gotNext != changed.res {
			t.Fatal("ValidateUpdate did not see the stored resource and the candidate")
		}
		created := widgetCandidate(t, "v2", nil)
		created.reg.ValidateUpdate = func(stored, next *pbresource.Resource) error { return errors.New("called on a create") }
		if _, err := planWrite(created, nil, newUID); err != nil {
			t.Fatalf("create: %v", err)
		}
	})
	t.Run("owner removed", func(t *testing.T) {
		s := &pbresource.Resource{Id: stored.Id, Version: "7", Data: stored.Data, Owner: owner, Metadata: stored.Metadata}
		if _, err := planWrite(base, s, newUID); err == nil || !strings.Contains(err.Error(), "owner: cannot change") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestPlanStatus(t *testing.T) {
	id := &pbresource.ID{Type: widgetType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: "w"}
	stored := &pbresource.Resource{
		Id:         &pbresource.ID{Type: widgetType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: "w", Uid: "U"},
		Version:    "9",
		Generation: 2,
		Status:     map[string]*pbresource.Status{"other": {ObservedGeneration: 1}},
	}
	req := func(og uint64, version string) *statusEntry {
		return &statusEntry{id: id, key: "ctrl", version: version, status: &pbresource.Status{ObservedGeneration: og}}
	}
	w, err := planStatus(req(2, ""), stored)
	if err != nil {
		t.Fatal(err)
	}
	if w.GetGeneration() != 2 || w.GetVersion() != "9" || len(w.GetStatus()) != 2 || w.GetStatus()["ctrl"].GetObservedGeneration() != 2 {
		t.Fatalf("planned %v", w)
	}
	if len(stored.Status) != 1 {
		t.Fatal("planStatus changed the stored resource's status map")
	}
	if _, err := planStatus(req(3, ""), stored); err == nil || !strings.Contains(err.Error(), "status.observed_generation: 3 is ahead of the resource's generation 2") {
		t.Fatalf("ahead: got %v", err)
	}
	if _, err := planStatus(req(1, "8"), stored); status.Code(err) != codes.Aborted {
		t.Fatalf("stale: got %v", err)
	}
	same := &statusEntry{id: id, key: "other", status: &pbresource.Status{ObservedGeneration: 1}}
	if w, err := planStatus(same, stored); err != nil || w != nil {
		t.Fatalf("identical status: got %v, %v; want no write", w, err)
	}
}

func TestWithPrefix(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{NewFieldError("id.name", "bad"), "resources[3].id.name: bad"},
		{NewFieldError("", "bad"), "resources[3]: bad"},
		{status.Error(codes.Aborted, "conflict"), "resources[3]: conflict"},
		{errors.New("boom"), "resources[3]: boom"},
	}
	for _, c := range cases {
		got := withPrefix("resources[3]", c.err)
		msg := got.Error()
		if st, ok := status.FromError(got); ok {
			msg = st.Message()
		}
		if msg != c.want {
			t.Errorf("withPrefix(%v) = %q, want %q", c.err, msg, c.want)
		}
	}
	if joinField("data", "[2].port") != "data[2].port" {
		t.Error("joinField with an index")
	}
}

func TestRegistry(t *testing.T) {
	r := testRegistry()
	if _, ok := r.Resolve(&pbresource.Type{Group: "demo", GroupVersion: "v1", Kind: "Widget"}); !ok {
		t.Fatal("Widget not resolved")
	}
	if _, ok := r.Resolve(&pbresource.Type{Group: "demo", GroupVersion: "v2", Kind: "Widget"}); ok {
		t.Fatal("another version resolved")
	}
	types := r.Types()
	if len(types) != 2 || types[0].Type.GetKind() != "Gadget" || types[1].Type.GetKind() != "Widget" {
		t.Fatalf("Types() = %v", types)
	}
	panics := []struct {
		name string
		reg  Registration
	}{
		{"twice", Registration{Type: widgetType, Proto: &wrapperspb.StringValue{}}},
		{"no proto", Registration{Type: &pbresource.Type{Group: "a", GroupVersion: "v1", Kind: "B"}}},
		{"no kind", Registration{Type: &pbresource.Type{Group: "a", GroupVersion: "v1"}, Proto: &wrapperspb.StringValue{}}},
		{"no type", Registration{Proto: &wrapperspb.StringValue{}}},
	}
	for _, p := range panics {
		t.Run(p.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("Register did not panic")
				}
			}()
			r.Register(p.reg)
		})
	}
}

// denyAll refuses everything, naming what it refused.
type denyAll struct{}

func (denyAll) OperatorRead() error  { return acl.ErrPermissionDenied }
func (denyAll) OperatorWrite() error { return acl.ErrPermissionDenied }
func (denyAll) NamespaceRead(ns string) error {
	return errors.Join(acl.ErrPermissionDenied, errors.New(ns))
}
func (denyAll) NamespaceWrite(ns string) error {
	return errors.Join(acl.ErrPermissionDenied, errors.New(ns))
}
func (denyAll) Agent() error  { return acl.ErrPermissionDenied }
func (denyAll) Server() error { return acl.ErrPermissionDenied }

func TestDefaultACLHooks(t *testing.T) {
	id := &pbresource.ID{Type: widgetType, Tenancy: &pbresource.Tenancy{Namespace: "team-a"}, Name: "w"}
	ns := DefaultACLHooks(ScopeNamespace)
	if err := ns.Read(denyAll{}, id); !errors.Is(err, acl.ErrPermissionDenied) || !strings.Contains(err.Error(), "team-a") {
		t.Errorf("namespaced Read: %v", err)
	}
	if err := ns.Write(denyAll{}, &pbresource.Resource{Id: id}); !errors.Is(err, acl.ErrPermissionDenied) {
		t.Errorf("namespaced Write: %v", err)
	}
	if err := ns.List(denyAll{}, &pbresource.Tenancy{Namespace: "team-a"}); !errors.Is(err, acl.ErrPermissionDenied) {
		t.Errorf("namespaced List: %v", err)
	}
	if err := ns.List(denyAll{}, &pbresource.Tenancy{Namespace: "*"}); err != nil {
		t.Errorf("wildcard List is filtered per resource, not refused: %v", err)
	}
	cl := DefaultACLHooks(ScopeCluster)
	if cl.Read(denyAll{}, id) == nil || cl.Write(denyAll{}, &pbresource.Resource{Id: id}) == nil || cl.List(denyAll{}, &pbresource.Tenancy{}) == nil {
		t.Error("cluster hooks allowed under denyAll")
	}
	for _, h := range []ACLHooks{ns, cl} {
		if h.Read(acl.AllowAll{}, id) != nil || h.Write(acl.AllowAll{}, &pbresource.Resource{Id: id}) != nil || h.List(acl.AllowAll{}, &pbresource.Tenancy{}) != nil {
			t.Error("refused under acl.AllowAll")
		}
	}
	custom := hooks(Registration{Scope: ScopeCluster, ACLs: &ACLHooks{Read: func(acl.Authorizer, *pbresource.ID) error { return nil }}})
	if custom.Read(denyAll{}, id) != nil || custom.Write(denyAll{}, &pbresource.Resource{Id: id}) == nil {
		t.Error("a type's own hook and the defaults were not combined")
	}
}
