package raft

import (
	"sync"

	hraft "github.com/hashicorp/raft"
)

// hashicorp/raft's pipelined replication can hold Shutdown forever. A
// leader's replication to a follower sends through an AppendPipeline,
// whose AppendEntries hands each request to the pipeline's decoder over a
// bounded channel; raft's own decoder of the responses (pipelineDecode)
// stops as soon as a follower answers with a newer term, which is what
// every leadership transfer ends with. Stopping replication then makes a
// last "best effort" send (replication.go, the stopCh case of
// pipelineReplicate) into a pipeline nobody reads any more: once its
// channels are full, AppendEntries blocks, and only the pipeline's Close,
// deferred in the very goroutine that is blocked, would release it.
// Raft's Shutdown waits for that goroutine. Seen here as TestLeaderCh
// hanging in leader.stop() after a transfer, under load.
//
// pipelineTransport is the NetworkTransport with the pipelines it opened
// kept, so that Backend.Shutdown can close them all once raft has been
// told to stop: a blocked AppendEntries then fails (ErrPipelineShutdown)
// and the replication goroutine ends. Closing a pipeline twice is a no-op
// in hashicorp/raft, so raft's own deferred Close stays harmless.
type pipelineTransport struct {
	*hraft.NetworkTransport

	mu     sync.Mutex
	open   map[hraft.AppendPipeline]struct{}
	closed bool
}

func newPipelineTransport(t *hraft.NetworkTransport) *pipelineTransport {
	return &pipelineTransport{NetworkTransport: t, open: make(map[hraft.AppendPipeline]struct{})}
}

// AppendEntriesPipeline opens a pipeline as NetworkTransport does and
// keeps it until it is closed; after closePipelines it refuses.
func (t *pipelineTransport) AppendEntriesPipeline(id hraft.ServerID, target hraft.ServerAddress) (hraft.AppendPipeline, error) {
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		_ = p.Close()
		return nil, hraft.ErrTransportShutdown
	}
	t.open[p] = struct{}{}
	return &keptPipeline{AppendPipeline: p, t: t}, nil
}

// closePipelines closes every open pipeline, and every later one as it
// opens.
func (t *pipelineTransport) closePipelines() {
	t.mu.Lock()
	t.closed = true
	open := t.open
	t.open = make(map[hraft.AppendPipeline]struct{})
	t.mu.Unlock()
	for p := range open {
		_ = p.Close()
	}
}

// openPipelines is how many pipelines are open (for tests).
func (t *pipelineTransport) openPipelines() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.open)
}

// keptPipeline is a pipeline the transport keeps until raft closes it.
type keptPipeline struct {
	hraft.AppendPipeline
	t *pipelineTransport
}

func (p *keptPipeline) Close() error {
	p.t.mu.Lock()
	delete(p.t.open, p.AppendPipeline)
	p.t.mu.Unlock()
	return p.AppendPipeline.Close()
}
