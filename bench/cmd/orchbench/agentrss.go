package main

import (
	"context"
	"fmt"
	"time"
	"trellis.dev/trellis/internal/testcluster"
)

// rssSettle is how long the agent is left alone before a memory reading
// at rest: a measurement pause, not a wait for a condition.
const rssSettle = 10 * time.Second

// rssResult is the agent memory cell's figures, in bytes.
type rssResult struct {
	tasks                  int
	idle, loaded, rest, hw int64
	load                   [2]string
}

// agentRSS reads the agent's resident size with no task, then with
// b.rssTasks tasks all RUNNING and reported, right away and at rest.
func (b *bench) agentRSS(ctx context.Context) (*rssResult, error) {
	ps := newProcs(b.cellDir("rss"), b.runID)
	defer ps.cleanup()
	r := &rssResult{tasks: b.rssTasks}
	r.load[0] = testcluster.LoadAvg()
	n, err := b.startNode(ctx, ps)
	if err != nil {
		return nil, err
	}
	defer n.api.close()
	if err := pause(ctx, rssSettle); err != nil {
		return nil, err
	}
	if r.idle, _, err = memStatus(n.agent.pid()); err != nil {
		return nil, err
	}
	var names []string
	for i := range b.rssTasks {
		names = append(names, fmt.Sprintf("rss-%04d", i))
	}
	_, _, waits, err := n.place(ctx, names)
	if err != nil {
		return nil, fmt.Errorf("%w (agent log: %s)", err, n.agent.log)
	}
	if r.loaded, _, err = memStatus(n.agent.pid()); err != nil {
		return nil, err
	}
	if err := pause(ctx, rssSettle); err != nil {
		return nil, err
	}
	if r.rest, r.hw, err = memStatus(n.agent.pid()); err != nil {
		return nil, err
	}
	if err := retire(ctx, n.api, n.tasks, names, waits); err != nil {
		return nil, err
	}
	r.load[1] = testcluster.LoadAvg()
	return r, nil
}
