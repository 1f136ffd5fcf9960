package resource_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

// A type's ValidateOwner hook sees the owner of every resource it creates,
// stored or written by the same batch; a create whose owner does not
// exist is refused; updates do not call it (owners are fixed).
func TestValidateOwner(t *testing.T) {
	penType := &pbresource.Type{Group: "demo", GroupVersion: "v1", Kind: "Pen"}
	capType := &pbresource.Type{Group: "demo", GroupVersion: "v1", Kind: "Cap"}
	reg := resource.NewRegistry()
	core.Register(reg)
	reg.Register(resource.Registration{Type: penType, Proto: &wrapperspb.StringValue{}})
	reg.Register(resource.Registration{Type: capType, Proto: &wrapperspb.StringValue{},
		// A cap is of its pen's colour.
		ValidateOwner: func(owner, res *pbresource.Resource) error {
			pen, err := resource.DecodeData[*wrapperspb.StringValue](owner)
			if err != nil {
				return err
			}
			c, err := resource.DecodeData[*wrapperspb.StringValue](res)
			if err != nil {
				return err
			}
			if c.GetValue() != pen.GetValue() {
				return resource.NewFieldError("data.value", "is %s; its pen is %s", c.GetValue(), pen.GetValue())
			}
			return nil
		},
	})
	svc := resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg})
	ctx := context.Background()
	if err := core.Bootstrap(ctx, svc); err != nil {
		t.Fatal(err)
	}
	res := func(typ *pbresource.Type, name, colour string, owner *pbresource.ID) *pbresource.Resource {
		data, _ := anypb.New(wrapperspb.String(colour))
		return &pbresource.Resource{Id: &pbresource.ID{Type: typ, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: name}, Owner: owner, Data: data}
	}
	write := func(r *pbresource.Resource) (*pbresource.Resource, error) {
		out, err := svc.Write(ctx, &pbresource.WriteRequest{Resource: r})
		return out.GetResource(), err
	}
	absent := func(typ *pbresource.Type, name string) bool {
		_, err := svc.Read(ctx, &pbresource.ReadRequest{Id: &pbresource.ID{Type: typ, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: name}})
		return status.Code(err) == codes.NotFound
	}

	pen, err := write(res(penType, "blue", "blue", nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := write(res(capType, "ok", "blue", pen.GetId())); err != nil {
		t.Fatalf("a cap that agrees with its pen: %v", err)
	}
	_, err = write(res(capType, "red", "red", pen.GetId()))
	requireCode(t, err, codes.InvalidArgument, "data.value: is red; its pen is blue")
	if !absent(capType, "red") {
		t.Fatal("a refused cap was written")
	}
	gone := &pbresource.ID{Type: penType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: "blue", Uid: "01J00000000000000000000000"}
	_, err = write(res(capType, "orphan", "blue", gone))
	requireCode(t, err, codes.FailedPrecondition, "owner: demo/v1/Pen/default/blue with uid 01J00000000000000000000000 does not exist")
	if !absent(capType, "orphan") {
		t.Fatal("a refused cap was written")
	}
	if _, err := write(res(capType, "loose", "green", nil)); err != nil {
		t.Fatalf("a cap without a pen: %v", err)
	}

	// In a batch, the owner is the member that writes it.
	batch := func(penColour, capColour string) error {
		ownerRef := &pbresource.ID{Type: penType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: "green"}
		_, err := svc.WriteBatch(ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{
			res(capType, "g", capColour, ownerRef), res(penType, "green", penColour, nil),
		}})
		return err
	}
	err = batch("green", "red")
	requireCode(t, err, codes.InvalidArgument, "resources[0].data.value: is red; its pen is green")
	if !absent(penType, "green") || !absent(capType, "g") {
		t.Fatal("a refused batch wrote something")
	}
	if err := batch("green", "green"); err != nil {
		t.Fatalf("a batch's cap that agrees with the batch's pen: %v", err)
	}

	// Updates are not checked again: the pen changes colour, the cap's
	// metadata changes, and it is written.
	if _, err := write(res(penType, "blue", "navy", nil)); err != nil {
		t.Fatal(err)
	}
	again := res(capType, "ok", "blue", pen.GetId())
	again.Metadata = map[string]string{"note": "kept"}
	if _, err := write(again); err != nil {
		t.Fatalf("updating a cap whose pen changed since: %v", err)
	}
}
