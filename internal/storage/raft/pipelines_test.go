package raft

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	hraft "github.com/hashicorp/raft"
)

// A pipeline whose answers nobody takes blocks AppendEntries, as raft's
// replication does once its decoder has stopped (pipelines.go);
// closePipelines releases it. The follower answers every request; the
// test never reads the pipeline's Consumer, as raft's stopped decoder
// does not; no deadlines are set: without closePipelines the second
// AppendEntries would wait forever.
func TestClosePipelinesReleasesABlockedAppend(t *testing.T) {
	follower, err := hraft.NewTCPTransport("127.0.0.1:0", nil, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Close()
	var received atomic.Int64
	go func() {
		for rpc := range follower.Consumer() {
			received.Add(1)
			rpc.Respond(&hraft.AppendEntriesResponse{Term: 1, Success: true}, nil)
		}
	}()
	plain, err := hraft.NewTCPTransport("127.0.0.1:0", nil, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	leader := newPipelineTransport(plain)
	p, err := leader.AppendEntriesPipeline("f", follower.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	if leader.openPipelines() != 1 {
		t.Fatalf("open pipelines: %d, want 1", leader.openPipelines())
	}
	var sent atomic.Int64
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := p.AppendEntries(&hraft.AppendEntriesRequest{Term: 1}, new(hraft.AppendEntriesResponse)); err != nil {
				done <- err
				return
			}
			sent.Add(1)
		}
	}()
	// The first request's answer waits for a reader of the Consumer that
	// never comes, so the second, sent, waits to be handed to the decoder.
	eventually(t, time.Minute, "the follower to have two requests", func() bool { return received.Load() >= 2 })
	leader.closePipelines()
	select {
	case err := <-done:
		if !errors.Is(err, hraft.ErrPipelineShutdown) {
			t.Fatalf("the blocked AppendEntries ended with %v, want ErrPipelineShutdown", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("closePipelines did not release the blocked AppendEntries")
	}
	if n := sent.Load(); n != 1 {
		t.Fatalf("%d AppendEntries returned before the pipeline was closed, want 1", n)
	}
	if leader.openPipelines() != 0 {
		t.Fatalf("open pipelines after closing: %d", leader.openPipelines())
	}
	if _, err := leader.AppendEntriesPipeline("f", follower.LocalAddr()); !errors.Is(err, hraft.ErrTransportShutdown) {
		t.Fatalf("a pipeline opened after closePipelines: %v, want ErrTransportShutdown", err)
	}
	_ = p.Close() // raft's own deferred Close: a no-op now
}
