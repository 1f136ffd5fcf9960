package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"google.golang.org/protobuf/types/known/anypb"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbcore "trellis.dev/trellis/api/core/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbstorage "trellis.dev/trellis/api/storage/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/server"
)

// Every sealed type the default modules register (the CA's signing keys),
// with a resource of it stored, is refused or left out by every read path
// of both shapes of server: every GET route of the HTTP API (the resource
// routes as read, list, strong read, list of every namespace and watch;
// the modules' and operator's routes; debug), a batch that compares it,
// the public gRPC Read, List, WatchList, ListByOwner and WriteBatch
// compares, and, on a Raft server, Forwarding.Read and Forwarding.List on
// the server-to-server port. No answer carries a stored sealed resource
// (its uid) or a private key. GET /v1/snapshot is the one exception, by
// design: a restore needs the keys (docs/cluster.md).
func TestSealedTypesLeaveByNoReadPath(t *testing.T) {
	for _, srv := range fullServers(t, nil) {
		kind := "raft"
		if srv.ServerGRPC() == nil {
			kind = "inmem"
		}
		t.Run(kind, func(t *testing.T) { checkSealedReadPaths(t, srv) })
	}
}

func checkSealedReadPaths(t *testing.T, srv *server.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := "http://" + srv.HTTPAddr()
	waitHealthy(t, base)
	eventually(t, 30*time.Second, "the CA manager ready", func() bool {
		resp, err := srv.API().Read(ctx, &pbresource.ReadRequest{Id: ca.ConfigID()})
		var st pbca.CAManagerStatus
		return err == nil && resp.GetResource().GetStatus()[ca.ManagerStatusKey].GetData().UnmarshalTo(&st) == nil && st.GetState() == ca.StateReady
	})

	// What is stored of each sealed type, read as the CA's own code does.
	var stored []*pbresource.Resource
	sealedTypes := 0
	for _, reg := range srv.Registry().Types() {
		if !reg.Sealed {
			continue
		}
		sealedTypes++
		ten := &pbresource.Tenancy{Namespace: "*"}
		if reg.Scope == resource.ScopeCluster {
			ten = &pbresource.Tenancy{}
		}
		list, err := srv.API().List(resource.FromOperations(ctx), &pbresource.ListRequest{Type: reg.Type, Tenancy: ten, Consistent: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.GetResources()) == 0 {
			t.Fatalf("nothing of the sealed type %s is stored: the test would check nothing", ids.TypeString(reg.Type))
		}
		stored = append(stored, list.GetResources()...)
	}
	if sealedTypes == 0 {
		t.Fatal("the default modules register no sealed type: the test would check nothing")
	}
	leaks := func(answer string) string {
		if strings.Contains(answer, "PRIVATE KEY") {
			return "a private key"
		}
		for _, res := range stored {
			if strings.Contains(answer, res.GetId().GetUid()) {
				return ids.String(res.GetId())
			}
		}
		return ""
	}

	// HTTP: every GET route, its path filled with each stored sealed
	// resource; the resource routes also strong, across namespaces and as
	// a watch. Those that name the type answer 403 naming it sealed; no
	// answer carries it.
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) (int, string) {
		t.Helper()
		rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
		defer rcancel()
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		// A stream (a watch that was not refused) is read until the
		// deadline: what it sent by then is what is checked.
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	walked := 0
	for _, r := range srv.HTTPRoutes() {
		method, pattern, ok := strings.Cut(r.Pattern, " ")
		if !ok || method != http.MethodGet || pattern == "/v1/snapshot" {
			continue
		}
		for _, res := range stored {
			id := res.GetId()
			path := strings.NewReplacer(
				"{group}/{version}/{kind}", ids.TypeString(id.GetType()),
				"{name}", id.GetName(), "{id}", id.GetName(), "{peer}", id.GetName(),
			).Replace(pattern)
			paths := []string{path}
			if strings.HasPrefix(pattern, "/v1/debug/pprof/") {
				paths = []string{path + "?seconds=1"}
			}
			namesType := strings.Contains(pattern, "{kind}")
			if namesType {
				paths = append(paths, path+"?consistent=1")
				if !strings.Contains(pattern, "{name}") {
					paths = append(paths, path+"?namespace=*", path+"?watch=1", path+"?watch=1&namespace=*")
				}
			}
			for _, p := range paths {
				walked++
				code, body := get(p)
				if what := leaks(body); what != "" {
					t.Errorf("GET %s (%s) answered %d carrying %s", p, r.Pattern, code, what)
				}
				if namesType && (code != http.StatusForbidden || !strings.Contains(body, "is sealed")) {
					t.Errorf("GET %s = %d %s; want 403 naming the type sealed", p, code, body)
				}
			}
		}
	}
	if walked < 20 {
		t.Errorf("only %d GET requests walked: the server is not fully built", walked)
	}

	grpcc := pbresource.NewResourceServiceClient(dialGRPC(t, srv.GRPCAddr()))
	probe := &pbresource.ID{Type: core.NamespaceType, Name: "probe"}
	emptyNamespace, err := anypb.New(&pbcore.Namespace{})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range stored {
		id := res.GetId()
		name := ids.String(id)
		// A batch that compares the resource would learn whether it is
		// there and at which version.
		batch := fmt.Sprintf(`{"resources":[{"type":"core/v1/Namespace","name":"probe","data":{}}],"compares":[{"op":"exists","type":%q,"name":%q}]}`, ids.TypeString(id.GetType()), id.GetName())
		if code, body := httpDo(t, http.MethodPut, base+"/v1/batch", batch); code != http.StatusForbidden || leaks(body) != "" {
			t.Errorf("PUT /v1/batch comparing %s = %d %s; want 403 without it", name, code, body)
		}

		refused := map[string]error{}
		_, refused["Read"] = grpcc.Read(ctx, &pbresource.ReadRequest{Id: id})
		_, refused["Read consistent"] = grpcc.Read(ctx, &pbresource.ReadRequest{Id: id, Consistent: true})
		_, refused["List"] = grpcc.List(ctx, &pbresource.ListRequest{Type: id.GetType(), Tenancy: id.GetTenancy()})
		_, refused["List consistent"] = grpcc.List(ctx, &pbresource.ListRequest{Type: id.GetType(), Tenancy: id.GetTenancy(), Consistent: true})
		_, refused["List every namespace"] = grpcc.List(ctx, &pbresource.ListRequest{Type: id.GetType(), Tenancy: &pbresource.Tenancy{Namespace: "*"}})
		_, refused["WriteBatch compare"] = grpcc.WriteBatch(ctx, &pbresource.WriteBatchRequest{
			Resources: []*pbresource.Resource{{Id: probe, Data: emptyNamespace}},
			Compares:  []*pbresource.Compare{{Op: pbresource.Compare_OP_EXISTS, Id: id}},
		})
		if stream, err := grpcc.WatchList(ctx, &pbresource.WatchListRequest{Type: id.GetType(), Tenancy: id.GetTenancy()}); err != nil {
			refused["WatchList"] = err
		} else {
			ev, err := stream.Recv()
			refused["WatchList"] = err
			if ev != nil {
				t.Errorf("gRPC WatchList of %s sent %v", name, ev)
			}
		}
		for call, err := range refused {
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "is sealed") || leaks(err.Error()) != "" {
				t.Errorf("gRPC %s of %s = %v; want PermissionDenied naming the type sealed", call, name, err)
			}
		}
		// ListByOwner spans types: it answers, without the sealed
		// resource, whether asked for its owner or for itself.
		for _, owner := range []*pbresource.ID{res.GetOwner(), id} {
			if owner == nil {
				continue
			}
			l, err := grpcc.ListByOwner(ctx, &pbresource.ListByOwnerRequest{Owner: owner})
			if err != nil {
				t.Errorf("gRPC ListByOwner %s: %v", ids.String(owner), err)
			}
			if what := leaks(fmt.Sprint(l.GetResources())); what != "" {
				t.Errorf("gRPC ListByOwner %s carries %s", ids.String(owner), what)
			}
		}

		// The server-to-server port: a caller that reaches it as a
		// server reads nothing sealed either.
		if srv.ServerGRPC() == nil {
			continue
		}
		fwd := pbstorage.NewForwardingClient(dialGRPC(t, srv.ServerAddr()))
		fwdRefused := map[string]error{}
		rr, err := fwd.Read(ctx, &pbstorage.ReadRequest{Id: id})
		fwdRefused["Read"] = err
		if what := leaks(fmt.Sprint(rr)); what != "" {
			t.Errorf("Forwarding.Read of %s carries %s", name, what)
		}
		for call, req := range map[string]*pbstorage.ListRequest{
			"List":                 {Type: id.GetType(), Tenancy: id.GetTenancy()},
			"List every namespace": {Type: id.GetType(), Tenancy: &pbresource.Tenancy{Namespace: "*"}},
			"List by name":         {Type: id.GetType(), Tenancy: id.GetTenancy(), NamePrefix: id.GetName()},
		} {
			stream, err := fwd.List(ctx, req)
			for err == nil {
				var page *pbstorage.ListResponse
				page, err = stream.Recv()
				if what := leaks(fmt.Sprint(page)); what != "" {
					t.Errorf("Forwarding.%s of %s carries %s", call, name, what)
				}
			}
			fwdRefused[call] = err
		}
		for call, err := range fwdRefused {
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), ids.TypeString(id.GetType())+" is sealed") {
				t.Errorf("Forwarding.%s of %s = %v; want PermissionDenied naming the type sealed", call, name, err)
			}
		}
	}
	// The refused batches wrote nothing.
	if _, err := srv.API().Read(ctx, &pbresource.ReadRequest{Id: probe, Consistent: true}); status.Code(err) != codes.NotFound {
		t.Errorf("after the refused batches, reading the namespace they would write = %v; want NotFound", err)
	}
}
