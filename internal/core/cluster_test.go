package core_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/resource"
)

func TestValidateCluster(t *testing.T) {
	good := "1b4e28ba-2fa1-41d2-883f-0016d3cca427"
	cases := []struct {
		name, resName, id, wantErr string
	}{
		{"valid", core.ClusterName, good, ""},
		{"another name", "other", good, `id.name: must be "default"`},
		{"empty id", core.ClusterName, "", `data.id: "" is not a UUID`},
		{"uppercase", core.ClusterName, strings.ToUpper(good), "data.id:"},
		{"no hyphens", core.ClusterName, strings.ReplaceAll(good, "-", "") + "abcd", "data.id:"},
		{"hyphen misplaced", core.ClusterName, "1b4e28ba2-fa1-41d2-883f-0016d3cca427", "data.id:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := core.NewCluster(c.id)
			if err != nil {
				t.Fatal(err)
			}
			res.Id.Name = c.resName
			err = core.ValidateCluster(res)
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("got %v, want %q", err, c.wantErr)
			}
		})
	}
}

func TestNewUUID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		u := core.NewUUID()
		if !core.IsUUID(u) || u[14] != '4' || !strings.ContainsRune("89ab", rune(u[19])) {
			t.Fatalf("%q is not a version 4 UUID", u)
		}
		if seen[u] {
			t.Fatalf("%q drawn twice", u)
		}
		seen[u] = true
	}
}

// The first Bootstrap fixes the id; later ones, and concurrent ones (two
// leaders in a row whose terms overlap in the store's eyes), keep it; no
// caller of the generic API changes or deletes it; anyone may read it.
func TestBootstrapFixesTheClusterIDOnce(t *testing.T) {
	ctx := context.Background()
	svc, b := newService(t, acl.AllowAll{})
	if _, err := core.ClusterID(ctx, svc); status.Code(err) != codes.NotFound {
		t.Fatalf("ClusterID before bootstrap = %v, want NotFound", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = core.Bootstrap(ctx, svc) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	id, err := core.ClusterID(ctx, svc)
	if err != nil || !core.IsUUID(id) {
		t.Fatalf("ClusterID = %q, %v", id, err)
	}
	idx := b.Store().Index()
	if err := core.Bootstrap(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if b.Store().Index() != idx {
		t.Fatal("a later Bootstrap wrote")
	}

	other, _ := core.NewCluster(core.NewUUID())
	if _, err := svc.Write(ctx, &pbresource.WriteRequest{Resource: other}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("generic write of the cluster id = %v, want FailedPrecondition", err)
	}
	// Even the server's own operations cannot change it: it is immutable.
	if _, err := svc.Write(resource.FromOperations(ctx), &pbresource.WriteRequest{Resource: other}); err == nil {
		t.Error("FromOperations write changed the cluster id")
	}
	if _, err := svc.Delete(ctx, &pbresource.DeleteRequest{Id: core.ClusterResourceID()}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("delete of the cluster id = %v, want FailedPrecondition", err)
	}
	if got, err := core.ClusterID(ctx, svc); err != nil || got != id {
		t.Fatalf("after the refused changes ClusterID = %q, %v; want %q", got, err, id)
	}

	// Not an operator, yet it reads the id (every certificate carries it).
	readerSvc := resource.NewService(resource.Config{
		Backend: b, Registry: registry(),
		Authorize: func(context.Context) (acl.Authorizer, error) { return denyOperator{}, nil },
	})
	if got, err := core.ClusterID(ctx, readerSvc); err != nil || got != id {
		t.Fatalf("ClusterID for a non-operator = %q, %v; want %q", got, err, id)
	}
}

func registry() *resource.Registry {
	r := resource.NewRegistry()
	core.Register(r)
	return r
}
