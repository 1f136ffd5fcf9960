package resource_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"trellis.dev/trellis/internal/acl"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

// TestACLCallSites: with a policy that refuses the namespace "secret" and
// every operator permission, each request is refused, or its results are
// filtered, and nothing is written. The same store, read through a service
// that allows everything, shows what was there.
func TestACLCallSites(t *testing.T) {
	backend := inmem.NewBackend()
	admin := newHarnessWith(t, backend)
	admin.createNamespace("secret")
	admin.createNamespace("open")
	secret := admin.write(widget(t, "secret", "w", "v"))
	admin.write(widget(t, "open", "w", "v"))
	owner := admin.write(gadget(t, "owner", 1))
	owned := widget(t, "secret", "owned", "v")
	owned.Owner = owner.GetId()
	admin.write(owned)
	ownedOpen := widget(t, "open", "owned", "v")
	ownedOpen.Owner = owner.GetId()
	admin.write(ownedOpen)

	p := &policy{deny: map[string]bool{"secret": true}, denyOperator: true}
	var tokens []string
	h := newHarnessWith(t, backend, withAuthorize(func(ctx context.Context) (acl.Authorizer, error) {
		tokens = append(tokens, resource.TokenFromContext(ctx))
		return p, nil
	}))
	h.ctx = resource.ContextWithToken(context.Background(), "tok-123")

	refused := []struct {
		name   string
		call   func() error
		asked  string
		denied string
	}{
		{"read", func() error {
			_, err := h.svc.Read(h.ctx, &pbresource.ReadRequest{Id: secret.GetId()})
			return err
		}, "namespace:read:secret", "read demo/v1/Widget/secret/w"},
		{"read of what does not exist", func() error {
			_, err := h.svc.Read(h.ctx, &pbresource.ReadRequest{Id: widgetID("secret", "nope")})
			return err
		}, "namespace:read:secret", "read demo/v1/Widget/secret/nope"},
		{"read cluster-scoped", func() error {
			_, err := h.svc.Read(h.ctx, &pbresource.ReadRequest{Id: owner.GetId()})
			return err
		}, "operator:read", "read demo/v1/Gadget/owner"},
		{"write", func() error {
			_, err := h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: widget(t, "secret", "w", "changed")})
			return err
		}, "namespace:write:secret", "write demo/v1/Widget/secret/w"},
		{"create namespace", func() error {
			_, err := h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: mustNamespace(t, "new")})
			return err
		}, "operator:write", "write core/v1/Namespace/new"},
		{"batch", func() error {
			_, err := h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{widget(t, "open", "x", "v"), widget(t, "secret", "x", "v")}})
			if err != nil && !containsMsg(err, "resources[1]: ") {
				t.Errorf("batch refusal does not name the member: %v", err)
			}
			return err
		}, "namespace:write:secret", "write demo/v1/Widget/secret/x"},
		{"write status", func() error {
			_, err := h.svc.WriteStatus(h.ctx, &pbresource.WriteStatusRequest{Id: secret.GetId(), Key: "ctrl", Status: &pbresource.Status{}})
			return err
		}, "namespace:write:secret", "write demo/v1/Widget/secret/w"},
		{"write status of what does not exist", func() error {
			_, err := h.svc.WriteStatus(h.ctx, &pbresource.WriteStatusRequest{Id: widgetID("secret", "nope"), Key: "ctrl", Status: &pbresource.Status{}})
			return err
		}, "namespace:write:secret", "write demo/v1/Widget/secret/nope"},
		{"delete", func() error {
			_, err := h.svc.Delete(h.ctx, &pbresource.DeleteRequest{Id: secret.GetId()})
			return err
		}, "namespace:write:secret", "write demo/v1/Widget/secret/w"},
		{"delete namespace", func() error {
			_, err := h.svc.Delete(h.ctx, &pbresource.DeleteRequest{Id: resource.NamespaceID("open")})
			return err
		}, "operator:write", "write core/v1/Namespace/open"},
		{"list", func() error {
			_, err := h.svc.List(h.ctx, &pbresource.ListRequest{Type: widgetType, Tenancy: &pbresource.Tenancy{Namespace: "secret"}})
			return err
		}, "namespace:read:secret", "list demo/v1/Widget in namespace secret"},
		{"list cluster-scoped", func() error {
			_, err := h.svc.List(h.ctx, &pbresource.ListRequest{Type: gadgetType})
			return err
		}, "operator:read", "list demo/v1/Gadget"},
		{"watch", func() error {
			_, err := h.svc.Watch(h.ctx, &pbresource.WatchListRequest{Type: widgetType, Tenancy: &pbresource.Tenancy{Namespace: "secret"}})
			return err
		}, "namespace:read:secret", "list demo/v1/Widget in namespace secret"},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			p.reset()
			before := admin.state()
			requireCode(t, c.call(), codes.PermissionDenied, c.denied, "permission denied")
			admin.requireUnchanged(before)
			if !p.asked(c.asked) {
				t.Fatalf("the authorizer was not asked %s; asked %v", c.asked, p.calls)
			}
		})
	}

	// Wildcard lists, owner lists and watches leave out what the caller may
	// not read.
	out, err := h.svc.List(h.ctx, &pbresource.ListRequest{Type: widgetType, Tenancy: &pbresource.Tenancy{Namespace: "*"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(out.GetResources()); !equalStrings(got, []string{"open/owned", "open/w"}) {
		t.Fatalf("wildcard list shows %v", got)
	}
	byOwner, err := h.svc.ListByOwner(h.ctx, &pbresource.ListByOwnerRequest{Owner: owner.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(byOwner.GetResources()); !equalStrings(got, []string{"open/owned"}) {
		t.Fatalf("list by owner shows %v", got)
	}
	w, err := h.svc.Watch(h.ctx, &pbresource.WatchListRequest{Type: widgetType, Tenancy: &pbresource.Tenancy{Namespace: "*"}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	admin.write(widget(t, "secret", "later", "v"))
	admin.write(widget(t, "open", "later", "v"))
	var seen []string
	for len(seen) < 4 {
		ev, err := w.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		id := ev.GetResource().GetId()
		seen = append(seen, ev.GetOp().String()+" "+id.GetTenancy().GetNamespace()+"/"+id.GetName())
	}
	want := []string{"OP_UPSERT open/owned", "OP_UPSERT open/w", "OP_END_OF_SNAPSHOT /", "OP_UPSERT open/later"}
	if !equalStrings(seen, want) {
		t.Fatalf("watch saw %v, want %v", seen, want)
	}

	// The token reached Authorize on every request.
	for _, tok := range tokens {
		if tok != "tok-123" {
			t.Fatalf("Authorize saw token %q", tok)
		}
	}
}

// TestAuthorizeErrors: a failing Authorize refuses the request, keeping a
// status code it gives and hiding an internal failure.
func TestAuthorizeErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{status.Error(codes.Unauthenticated, "token expired"), codes.Unauthenticated, "token expired"},
		{errors.Join(acl.ErrPermissionDenied, errors.New("token not found")), codes.PermissionDenied, "token not found"},
		{acl.ErrTokenRequired, codes.Unauthenticated, "token is required"},
		{errors.New("acl store exploded at 0xdeadbeef"), codes.Internal, "internal error"},
	} {
		h := newHarness(t, withAuthorize(func(context.Context) (acl.Authorizer, error) { return nil, c.err }))
		before := h.state()
		_, err := h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: widget(t, "", "w", "v")})
		requireCode(t, err, c.code, c.msg)
		if containsMsg(err, "deadbeef") {
			t.Fatal("an internal error leaked its detail")
		}
		h.requireUnchanged(before)
	}
}

func containsMsg(err error, s string) bool {
	st, _ := status.FromError(err)
	return st != nil && strings.Contains(st.Message(), s)
}

func mustNamespace(t testing.TB, name string) *pbresource.Resource {
	t.Helper()
	res, err := core.NewNamespace(name, "")
	if err != nil {
		t.Fatal(err)
	}
	return res
}
