package resource_test

import (
	"errors"
	"testing"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// Registry.Check refuses exactly what a write refuses before it reads the
// store, with the same error, without a store.
func TestRegistryCheckAgreesWithWrite(t *testing.T) {
	h := newHarness(t)
	reg := resource.NewRegistry()
	registerTestTypes(reg)
	for _, tc := range []struct {
		name string
		res  *pbresource.Resource
		want string // "" when accepted
	}{
		{"accepted", widget(t, "default", "w", "fine"), ""},
		{"accepted after Mutate", widget(t, "default", "w", ""), ""},
		{"bad name", widget(t, "default", "Bad_Name", "x"), `id.name: "Bad_Name" is not a valid name: must be a lowercase DNS label (a-z, 0-9, '-', at most 63 characters)`},
		{"Validate hook", widget(t, "default", "w", "invalid"), `data.value: must not be "invalid"`},
		{"wrong data type", &pbresource.Resource{Id: widgetID("default", "w"), Data: anyOf(t, wrapperspb.Int64(1))},
			`data: has type "type.googleapis.com/google.protobuf.Int64Value" but demo/v1/Widget holds google.protobuf.StringValue`},
		{"bad metadata", func() *pbresource.Resource {
			r := widget(t, "default", "w", "x")
			r.Metadata = map[string]string{"a b": "c"}
			return r
		}(), `metadata["a b"]: key is not valid`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := reg.Check(tc.res)
			_, werr := h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: tc.res})
			if tc.want == "" {
				if err != nil || werr != nil {
					t.Fatalf("check %v, write %v", err, werr)
				}
				return
			}
			var fe *resource.FieldError
			if !errors.As(err, &fe) || len(err.Error()) < len(tc.want) || err.Error()[:len(tc.want)] != tc.want {
				t.Fatalf("check: %v, want a FieldError starting %q", err, tc.want)
			}
			if st, _ := status.FromError(werr); st.Message() != err.Error() {
				t.Fatalf("write says %v, check %v", werr, err)
			}
		})
	}
}
