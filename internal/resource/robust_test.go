package resource_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

// TestNilAndEmptyRequests: requests with nothing in them, or nil, are
// refused as bad input, never a panic or an internal error.
func TestNilAndEmptyRequests(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	calls := map[string]func() error{
		"read nil":   func() error { _, err := h.svc.Read(ctx, nil); return err },
		"read empty": func() error { _, err := h.svc.Read(ctx, &pbresource.ReadRequest{Id: &pbresource.ID{}}); return err },
		"write nil":  func() error { _, err := h.svc.Write(ctx, nil); return err },
		"write empty": func() error {
			_, err := h.svc.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{}})
			return err
		},
		"write empty type": func() error {
			_, err := h.svc.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: &pbresource.ID{Type: &pbresource.Type{}}}})
			return err
		},
		"batch nil": func() error { _, err := h.svc.WriteBatch(ctx, nil); return err },
		"batch nil members": func() error {
			_, err := h.svc.WriteBatch(ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{nil, nil}})
			return err
		},
		"status nil": func() error { _, err := h.svc.WriteStatus(ctx, nil); return err },
		"status empty": func() error {
			_, err := h.svc.WriteStatus(ctx, &pbresource.WriteStatusRequest{Status: &pbresource.Status{}})
			return err
		},
		"list nil":        func() error { _, err := h.svc.List(ctx, nil); return err },
		"list empty type": func() error { _, err := h.svc.List(ctx, &pbresource.ListRequest{Type: &pbresource.Type{}}); return err },
		"by owner nil":    func() error { _, err := h.svc.ListByOwner(ctx, nil); return err },
		"by owner empty": func() error {
			_, err := h.svc.ListByOwner(ctx, &pbresource.ListByOwnerRequest{Owner: &pbresource.ID{}})
			return err
		},
		"delete nil":   func() error { _, err := h.svc.Delete(ctx, nil); return err },
		"delete empty": func() error { _, err := h.svc.Delete(ctx, &pbresource.DeleteRequest{Id: &pbresource.ID{}}); return err },
		"watch nil":    func() error { _, err := h.svc.Watch(ctx, nil); return err },
		"watch empty": func() error {
			_, err := h.svc.Watch(ctx, &pbresource.WatchListRequest{Tenancy: &pbresource.Tenancy{}})
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			requireCode(t, call(), codes.InvalidArgument)
		})
	}
}

// FuzzRequests feeds arbitrary encoded requests to the write paths. Run
// as a test it covers the seeds; `go test -fuzz FuzzRequests` explores.
// Whatever comes in, the answer is success or a status error other than
// Internal, and a success stores what it returns.
func FuzzRequests(f *testing.F) {
	seed := func(which uint8, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(which, b)
	}
	w := widget(f, "", "web", "v1")
	w.Metadata = map[string]string{"app": "web"}
	seed(0, &pbresource.WriteRequest{Resource: w})
	owned := widget(f, "", "owned", "v")
	owned.Owner = &pbresource.ID{Type: gadgetType, Name: "g", Uid: "U"}
	seed(0, &pbresource.WriteRequest{Resource: owned})
	seed(0, &pbresource.WriteRequest{Resource: gadget(f, "g", 3)})
	seed(0, &pbresource.WriteRequest{Resource: mustNamespace(f, "team-a")})
	seed(1, &pbresource.WriteBatchRequest{Resources: batchOf(f, "", 3, "v")})
	seed(2, &pbresource.WriteStatusRequest{Id: widgetID("", "web"), Key: "ctrl", Status: &pbresource.Status{Conditions: []*pbresource.Condition{{Type: "Ready"}}}})
	seed(3, &pbresource.DeleteRequest{Id: widgetID("", "web")})

	h := newHarness(f)
	h.write(widget(f, "", "web", "v0"))
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		var err error
		var out []*pbresource.Resource
		switch which % 4 {
		case 0:
			var req pbresource.WriteRequest
			if proto.Unmarshal(b, &req) != nil {
				return
			}
			var resp *pbresource.WriteResponse
			resp, err = h.svc.Write(h.ctx, &req)
			out = append(out, resp.GetResource())
		case 1:
			var req pbresource.WriteBatchRequest
			if proto.Unmarshal(b, &req) != nil {
				return
			}
			var resp *pbresource.WriteBatchResponse
			resp, err = h.svc.WriteBatch(h.ctx, &req)
			out = resp.GetResources()
		case 2:
			var req pbresource.WriteStatusRequest
			if proto.Unmarshal(b, &req) != nil {
				return
			}
			var resp *pbresource.WriteStatusResponse
			resp, err = h.svc.WriteStatus(h.ctx, &req)
			out = append(out, resp.GetResource())
		case 3:
			var req pbresource.DeleteRequest
			if proto.Unmarshal(b, &req) != nil {
				return
			}
			_, err = h.svc.Delete(h.ctx, &req)
		}
		if err != nil {
			st, ok := status.FromError(err)
			if !ok || st.Code() == codes.Internal || st.Code() == codes.Unknown {
				t.Fatalf("error %v is not a proper refusal", err)
			}
			return
		}
		for _, r := range out {
			if stored := storedIn(t, h.backend, r.GetId()); !proto.Equal(stored, r) {
				t.Fatalf("returned %v, stored %v", r, stored)
			}
		}
	})
}
