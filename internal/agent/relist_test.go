package agent

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
	"trellis.dev/trellis/internal/testlog"
)

// An agent away long enough that the server no longer keeps the index its
// watch would resume from is told to list again (OutOfRange); the fresh
// listing shows what changed meanwhile, deletions included.
//
// The server here is the real resource service over an in-memory store
// that keeps only a few events, served on a gRPC server the test stops and
// starts again on the same address (what an agent sees of a server
// restarting, without the store forgetting).
func TestWatchListsAgainWhenItCannotResume(t *testing.T) {
	reg := resource.NewRegistry()
	core.Register(reg)
	orchestrator.Register(reg)
	svc := resource.NewService(resource.Config{Backend: inmem.NewBackend(inmem.WithEventHistory(4)), Registry: reg, Logger: testlog.Logger(t)})
	if err := core.Bootstrap(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	beats := &heartbeats{api: svc, ttl: DefaultTTL}
	serve := func(addr string) (stop func()) {
		var ln net.Listener
		eventually(t, "listening on "+addr, func() bool {
			var err error
			ln, err = net.Listen("tcp", addr)
			return err == nil
		})
		gs := grpc.NewServer()
		pbresource.RegisterResourceServiceServer(gs, svc)
		pbagent.RegisterAgentServiceServer(gs, beats)
		done := make(chan struct{})
		go func() { defer close(done); _ = gs.Serve(ln) }()
		return func() { gs.Stop(); <-done }
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	stop := serve(addr)
	ts := &testServer{res: directClient(t, addr)}

	pt := newProcTable(t)
	counts := newRPCs()
	cfg := config(t, "i-1", pt)
	cfg.Servers = []string{addr}
	cfg.DialOptions = counts.dialOptions()
	a := startAgent(t, cfg)
	registered(t, ts, a)
	ts.registerDefinition(t, "default", shDefinition("sleeper", "exec sleep 1000"))
	ts.place(t, "default", "t1", "sleeper:1", "i-1")
	tk := ts.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))

	// The server goes away; meanwhile t1 is deleted and many other changes
	// push the index the agent had out of the store's history.
	stop()
	eventually(t, "the agent notices", func() bool { return a.Server() == "" })
	if _, err := svc.Delete(context.Background(), &pbresource.DeleteRequest{Id: orchestrator.TaskID("default", "t1")}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		data, _ := anypb.New(&pborch.Task{TaskDefinition: "sleeper:1", Instance: "i-2", StartedBy: "test"})
		if _, err := svc.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: orchestrator.TaskID("default", fmt.Sprint("other-", i)), Data: data}}); err != nil {
			t.Fatal(err)
		}
	}
	stop = serve(addr)
	t.Cleanup(stop)

	pid, _ := strconv.Atoi(tk.GetContainers()[0].GetRuntimeId())
	eventually(t, "the deleted task is stopped", func() bool {
		select {
		case <-pt.find(pid).done:
			return true
		default:
			return false
		}
	})
	if n := counts.count("WatchList"); n < 3 {
		t.Errorf("WatchList opened %d times; want the first, the refused resume, and the new listing", n)
	}
	ts.place(t, "default", "t2", "sleeper:1", "i-1")
	ts.waitTask(t, "default", "t2", "runs after the new listing", lastStatus(orchestrator.StatusRunning))
}

func directClient(t *testing.T, addr string) pbresource.ResourceServiceClient {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pbresource.NewResourceServiceClient(conn)
}
