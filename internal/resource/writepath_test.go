package resource_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

// The write path avoids copies and decodes where it can; these tests pin
// what must still hold when it does.

// A Mutate hook that changes only the metadata: the data decoded before
// the hook is what is stored, and the metadata it set is still validated.
func TestMutateMetadataOnly(t *testing.T) {
	kind := &pbresource.Type{Group: "demo", GroupVersion: "v1", Kind: "Labelled"}
	reg := resource.NewRegistry()
	reg.Register(resource.Registration{
		Type:  kind,
		Proto: &wrapperspb.StringValue{},
		Scope: resource.ScopeCluster,
		Mutate: func(res *pbresource.Resource) error {
			if res.Metadata == nil {
				res.Metadata = map[string]string{}
			}
			res.Metadata["mutated"] = "yes"
			if res.GetId().GetName() == "bad" {
				res.Metadata["not a key!"] = "x"
			}
			return nil
		},
	})
	svc := resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg})
	ctx := context.Background()

	// A non-canonical encoding of "v": the field twice, the last one wins.
	var raw []byte
	for _, v := range []string{"first", "v"} {
		raw = protowire.AppendTag(raw, 1, protowire.BytesType)
		raw = protowire.AppendString(raw, v)
	}
	in := &pbresource.Resource{
		Id:   &pbresource.ID{Type: kind, Name: "good"},
		Data: &anypb.Any{TypeUrl: "type.googleapis.com/google.protobuf.StringValue", Value: raw},
	}
	out, err := svc.Write(ctx, &pbresource.WriteRequest{Resource: in})
	if err != nil {
		t.Fatal(err)
	}
	if out.GetResource().GetMetadata()["mutated"] != "yes" {
		t.Errorf("metadata %v: the hook's label is missing", out.GetResource().GetMetadata())
	}
	canonical, _ := proto.MarshalOptions{Deterministic: true}.Marshal(wrapperspb.String("v"))
	if got := out.GetResource().GetData().GetValue(); string(got) != string(canonical) {
		t.Errorf("stored data %x, want the canonical encoding %x", got, canonical)
	}
	if string(in.GetData().GetValue()) != string(raw) || in.GetMetadata() != nil {
		t.Error("the write changed the caller's resource")
	}

	in.Id.Name = "bad"
	_, err = svc.Write(ctx, &pbresource.WriteRequest{Resource: in})
	if err == nil || !strings.Contains(err.Error(), "metadata") {
		t.Fatalf("metadata the hook set is not validated: %v", err)
	}
}

// A Mutate hook that re-encodes the data in place (MarshalFrom) is seen:
// the new data is decoded, validated and stored; the caller's Any is left
// as it was sent.
func TestMutateReencodesData(t *testing.T) {
	h := newHarness(t)
	in := widget(t, "", "blank", "")
	sent := proto.Clone(in.GetData())
	out := h.write(in)
	v, err := resource.DecodeData[*wrapperspb.StringValue](out)
	if err != nil || v.GetValue() != "unnamed" {
		t.Fatalf("stored %v, %v; want the hook's default", v, err)
	}
	if !proto.Equal(in.GetData(), sent) {
		t.Errorf("the caller's data changed to %v", in.GetData())
	}
}

// Stored data whose bytes differ from the canonical encoding of equal data
// (written by another version, say) is compared decoded: writing the same
// data again changes nothing.
func TestNoopAgainstOtherEncoding(t *testing.T) {
	h := newHarness(t)
	first := h.write(widget(t, "", "w", "v"))

	var raw []byte
	for _, v := range []string{"older", "v"} {
		raw = protowire.AppendTag(raw, 1, protowire.BytesType)
		raw = protowire.AppendString(raw, v)
	}
	odd := proto.Clone(first).(*pbresource.Resource)
	odd.Data.Value = raw
	if _, err := h.backend.WriteCAS(h.ctx, odd); err != nil {
		t.Fatal(err)
	}
	before := h.state()
	got := h.write(widget(t, "", "w", "v"))
	h.requireUnchanged(before)
	if got.GetGeneration() != first.GetGeneration() {
		t.Errorf("generation %d, want %d: equal data is no change", got.GetGeneration(), first.GetGeneration())
	}
}

// The API face copies what it returns (changing a result cannot change the
// store); the gRPC face answers with the stored resource itself, which gRPC
// only encodes. Both answer the same.
func TestResultCopies(t *testing.T) {
	h := newHarness(t)
	out, err := h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: widget(t, "", "w", "v")})
	if err != nil {
		t.Fatal(err)
	}
	out.GetResource().Metadata = map[string]string{"changed": "by the caller"}
	out.GetResource().GetId().Name = "renamed"
	stored := h.stored(widgetID("default", "w"))
	if stored == nil || len(stored.GetMetadata()) != 0 {
		t.Fatalf("changing a Write result changed the store: %v", stored)
	}

	g := h.svc.GRPC()
	batch, err := g.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{widget(t, "", "x", "v"), widget(t, "", "y", "v")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range batch.GetResources() {
		read, err := g.Read(h.ctx, &pbresource.ReadRequest{Id: res.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(read.GetResource(), res) {
			t.Errorf("gRPC read %v, want what the batch answered %v", read.GetResource(), res)
		}
	}
}
