package core_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"trellis.dev/trellis/internal/acl"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbcore "trellis.dev/trellis/api/core/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

func nsResource(t *testing.T, description string) *pbresource.Resource {
	t.Helper()
	res, err := core.NewNamespace("team-a", description)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestValidateNamespace(t *testing.T) {
	cases := []struct {
		name    string
		res     func() *pbresource.Resource
		wantErr string
	}{
		{"empty description", func() *pbresource.Resource { return nsResource(t, "") }, ""},
		{"1024 characters", func() *pbresource.Resource { return nsResource(t, strings.Repeat("é", 1024)) }, ""},
		{"1025 characters", func() *pbresource.Resource { return nsResource(t, strings.Repeat("d", 1025)) }, "data.description: is 1025 characters long, over the limit of 1024"},
		{"invalid UTF-8", func() *pbresource.Resource {
			res := nsResource(t, "")
			res.Data.Value = []byte{0x0a, 0x01, 0xff} // description = "\xff"
			return res
		}, "data: does not decode as trellis.core.v1.Namespace"},
		{"no data", func() *pbresource.Resource { return &pbresource.Resource{Id: core.NamespaceID("x")} }, "data: is required"},
		{"wrong data", func() *pbresource.Resource {
			d, _ := anypb.New(wrapperspb.String("x"))
			return &pbresource.Resource{Id: core.NamespaceID("x"), Data: d}
		}, "data: has type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := core.ValidateNamespace(c.res())
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var fe *resource.FieldError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("got %v, want a FieldError with %q", err, c.wantErr)
			}
		})
	}
}

func TestRegister(t *testing.T) {
	r := resource.NewRegistry()
	core.Register(r)
	reg, ok := r.Resolve(core.NamespaceType)
	if !ok {
		t.Fatal("Namespace not registered")
	}
	if reg.Scope != resource.ScopeCluster {
		t.Fatal("Namespace is not cluster-scoped")
	}
	if _, ok := reg.Proto.(*pbcore.Namespace); !ok {
		t.Fatalf("Namespace data is %T", reg.Proto)
	}
}

func newService(t *testing.T, authz acl.Authorizer) (*resource.Service, *inmem.Backend) {
	r := resource.NewRegistry()
	core.Register(r)
	b := inmem.NewBackend()
	return resource.NewService(resource.Config{
		Backend:   b,
		Registry:  r,
		Authorize: func(context.Context) (acl.Authorizer, error) { return authz, nil },
	}), b
}

func TestBootstrap(t *testing.T) {
	ctx := context.Background()
	svc, b := newService(t, acl.AllowAll{})
	if err := core.Bootstrap(ctx, svc); err != nil {
		t.Fatal(err)
	}
	out, err := svc.Read(ctx, &pbresource.ReadRequest{Id: core.NamespaceID(core.DefaultNamespace)})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := resource.DecodeData[*pbcore.Namespace](out.GetResource())
	if err != nil || ns.GetDescription() != core.DefaultNamespaceDescription {
		t.Fatalf("default namespace %v, %v", ns, err)
	}

	// Idempotent, and an operator's description is kept.
	edited, _ := core.NewNamespace(core.DefaultNamespace, "ours")
	if _, err := svc.Write(ctx, &pbresource.WriteRequest{Resource: edited}); err != nil {
		t.Fatal(err)
	}
	idx := b.Store().Index()
	if err := core.Bootstrap(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if b.Store().Index() != idx {
		t.Fatal("a second Bootstrap wrote")
	}
	out, _ = svc.Read(ctx, &pbresource.ReadRequest{Id: core.NamespaceID(core.DefaultNamespace)})
	if ns, _ := resource.DecodeData[*pbcore.Namespace](out.GetResource()); ns.GetDescription() != "ours" {
		t.Fatalf("Bootstrap replaced the description: %q", ns.GetDescription())
	}
}

type denyOperator struct{ acl.AllowAll }

func (denyOperator) OperatorRead() error  { return acl.ErrPermissionDenied }
func (denyOperator) OperatorWrite() error { return acl.ErrPermissionDenied }

func TestBootstrapRefused(t *testing.T) {
	svc, b := newService(t, denyOperator{})
	err := core.Bootstrap(context.Background(), svc)
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("got %v, want PermissionDenied", err)
	}
	if b.Store().Index() != 0 {
		t.Fatal("a refused Bootstrap wrote")
	}
}
