package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	pbcore "trellis.dev/trellis/api/core/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/server"
)

var (
	secretType = &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Secret"}
	holderType = &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Holder"}
)

// secretMaterial stands for a private key: no answer of the server to an
// outside caller may hold it.
const secretMaterial = "PRIVATE-KEY-MATERIAL-4f1c"

// A sealed type is stored, but no generic call over HTTP or gRPC reads,
// lists, watches, writes, compares, sets the status of or deletes it, and
// none of the answers carries it; the server's own code (FromOperations)
// reads it, and the owner reaper still deletes it with its owner and what
// it owns with it.
func TestSealedTypeNeverLeavesTheServer(t *testing.T) {
	types := typesModule{name: "sealed", register: func(reg *resource.Registry) {
		reg.Register(resource.Registration{Type: secretType, Proto: &pbcore.Namespace{}, Scope: resource.ScopeCluster, Sealed: true})
		reg.Register(resource.Registration{Type: holderType, Proto: &pbcore.Namespace{}, Scope: resource.ScopeCluster})
	}}
	srv, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702",
		Modules:         []module.Module{core.Module(), types},
		ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	runServer(t, srv)
	base := "http://" + srv.HTTPAddr()
	waitHealthy(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ops := resource.FromOperations(ctx)
	api := srv.API()

	// The server's own code stores a secret owned by a holder, and a
	// second secret that itself owns a holder.
	holder := writeRes(t, ctx, api, holderType, "h-1", "a holder", nil)
	secret := writeRes(t, ops, api, secretType, "s-1", secretMaterial, holder.GetId())
	owner := writeRes(t, ops, api, secretType, "s-2", secretMaterial, nil)
	owned := writeRes(t, ctx, api, holderType, "h-2", "owned by a secret", owner.GetId())

	// In process, without the mark, the generic API refuses it too.
	if _, err := api.Read(ctx, &pbresource.ReadRequest{Id: secret.GetId()}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("in-process Read without FromOperations = %v, want PermissionDenied", err)
	}
	// With it, reads, lists and lists by owner work.
	got, err := api.Read(ops, &pbresource.ReadRequest{Id: secret.GetId()})
	if err != nil || !strings.Contains(got.GetResource().GetData().String(), secretMaterial) {
		t.Errorf("FromOperations Read = %v, %v", got, err)
	}
	if l, err := api.List(ops, &pbresource.ListRequest{Type: secretType}); err != nil || len(l.GetResources()) != 2 {
		t.Errorf("FromOperations List = %d resources, %v; want 2", len(l.GetResources()), err)
	}
	if l, err := api.ListByOwner(ops, &pbresource.ListByOwnerRequest{Owner: holder.GetId()}); err != nil || len(l.GetResources()) != 1 {
		t.Errorf("FromOperations ListByOwner = %d resources, %v; want the secret", len(l.GetResources()), err)
	}

	// HTTP: every route that names the type answers 403, and no answer
	// holds the secret, nor names the type among the known ones.
	secretPath := "/v1/resources/test/v1/Secret"
	for _, tc := range []struct{ method, path, body string }{
		{"GET", secretPath + "/s-1", ""},
		{"GET", secretPath + "/s-1?consistent=1", ""},
		{"GET", secretPath, ""},
		{"GET", secretPath + "?watch=1", ""},
		{"PUT", secretPath + "/s-1", `{"data":{"description":"replaced"}}`},
		{"DELETE", secretPath + "/s-1", ""},
		{"PUT", "/v1/batch", `{"resources":[{"type":"test/v1/Secret","name":"s-3","data":{}}]}`},
		{"PUT", "/v1/batch", `{"resources":[{"type":"test/v1/Holder","name":"h-3","data":{}}],"compares":[{"op":"exists","type":"test/v1/Secret","name":"s-1"}]}`},
	} {
		code, body := httpDo(t, tc.method, base+tc.path, tc.body)
		if code != http.StatusForbidden || !strings.Contains(body, "sealed") || strings.Contains(body, secretMaterial) {
			t.Errorf("%s %s = %d %s; want 403 naming the type sealed, without the secret", tc.method, tc.path, code, body)
		}
	}
	if code, body := httpDo(t, "GET", base+"/v1/resources/test/v1/Nope", ""); code != http.StatusBadRequest || strings.Contains(body, "Secret") || !strings.Contains(body, "test/v1/Holder") {
		t.Errorf("GET an unknown type = %d %s; want 400 listing the known types without the sealed one", code, body)
	}

	// gRPC: the same for every call.
	grpcc := pbresource.NewResourceServiceClient(dialGRPC(t, srv.GRPCAddr()))
	anyData, _ := anypb.New(&pbcore.Namespace{Description: "replaced"})
	refused := map[string]error{}
	_, refused["Read"] = grpcc.Read(ctx, &pbresource.ReadRequest{Id: secret.GetId(), Consistent: true})
	_, refused["List"] = grpcc.List(ctx, &pbresource.ListRequest{Type: secretType})
	_, refused["Write"] = grpcc.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: secret.GetId(), Data: anyData}})
	_, refused["WriteBatch"] = grpcc.WriteBatch(ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{{Id: secret.GetId(), Data: anyData}}})
	_, refused["WriteBatch compare"] = grpcc.WriteBatch(ctx, &pbresource.WriteBatchRequest{
		Resources: []*pbresource.Resource{{Id: &pbresource.ID{Type: holderType, Name: "h-4"}, Data: anyData}},
		Compares:  []*pbresource.Compare{{Op: pbresource.Compare_OP_NOTHING_NEWER, Id: &pbresource.ID{Type: secretType}}},
	})
	_, refused["WriteStatus"] = grpcc.WriteStatus(ctx, &pbresource.WriteStatusRequest{Id: secret.GetId(), Key: "probe", Status: &pbresource.Status{}})
	_, refused["WriteStatuses"] = grpcc.WriteStatuses(ctx, &pbresource.WriteStatusesRequest{Statuses: []*pbresource.WriteStatusRequest{{Id: secret.GetId(), Key: "probe", Status: &pbresource.Status{}}}})
	_, refused["Delete"] = grpcc.Delete(ctx, &pbresource.DeleteRequest{Id: secret.GetId()})
	if stream, err := grpcc.WatchList(ctx, &pbresource.WatchListRequest{Type: secretType}); err != nil {
		refused["WatchList"] = err
	} else {
		_, refused["WatchList"] = stream.Recv()
	}
	for call, err := range refused {
		if status.Code(err) != codes.PermissionDenied || strings.Contains(err.Error(), secretMaterial) {
			t.Errorf("gRPC %s on the sealed type = %v, want PermissionDenied without the secret", call, err)
		}
	}
	// ListByOwner spans types: it answers, leaving the secret out.
	if l, err := grpcc.ListByOwner(ctx, &pbresource.ListByOwnerRequest{Owner: holder.GetId()}); err != nil || len(l.GetResources()) != 0 {
		t.Errorf("gRPC ListByOwner = %v, %v; want no resources", l.GetResources(), err)
	}
	// Nothing was written or deleted by the refused calls.
	if got, err := api.Read(ops, &pbresource.ReadRequest{Id: secret.GetId(), Consistent: true}); err != nil || got.GetResource().GetVersion() != secret.GetVersion() {
		t.Errorf("after the refusals the secret is %v, %v; want it unchanged", got, err)
	}

	// The reaper: deleting the holder deletes the secret it owns;
	// deleting the owning secret (in process) deletes the holder it owns,
	// which the reaper learns from its watch of the sealed type.
	if _, err := api.Delete(ctx, &pbresource.DeleteRequest{Id: holder.GetId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Delete(ops, &pbresource.DeleteRequest{Id: owner.GetId()}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the reaper to delete the sealed owned resource", func() bool {
		_, err := api.Read(ops, &pbresource.ReadRequest{Id: secret.GetId(), Consistent: true})
		return status.Code(err) == codes.NotFound
	})
	eventually(t, 30*time.Second, "the reaper to delete what the sealed owner owned", func() bool {
		_, err := api.Read(ctx, &pbresource.ReadRequest{Id: owned.GetId(), Consistent: true})
		return status.Code(err) == codes.NotFound
	})
}

func writeRes(t *testing.T, ctx context.Context, api resource.API, typ *pbresource.Type, name, description string, owner *pbresource.ID) *pbresource.Resource {
	t.Helper()
	data, err := anypb.New(&pbcore.Namespace{Description: description})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := api.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{
		Id: &pbresource.ID{Type: typ, Name: name}, Owner: owner, Data: data}})
	if err != nil {
		t.Fatalf("write %s: %v", name, err)
	}
	return resp.GetResource()
}

func httpDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
