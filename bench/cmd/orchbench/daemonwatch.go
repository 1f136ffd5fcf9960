package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/scheduler"
)

// deploymentWatch follows the Deployments of one namespace through one
// WatchList stream: the latest of each, and when each was first seen in a
// final status. Times are taken as events are received.
type deploymentWatch struct {
	changes
	latest  map[string]*pbscheduler.Deployment
	endedAt map[string]time.Time
}

// finalStatus says whether a deployment's status is one it never leaves.
func finalStatus(s string) bool {
	switch s {
	case "completed", "stopped", "canceled", "unhealthy", "timed-out":
		return true
	}
	return false
}

// watchDeployments opens the watch and returns once its snapshot is in.
func watchDeployments(ctx context.Context, cli pbresource.ResourceServiceClient, ns string) (*deploymentWatch, error) {
	stream, err := cli.WatchList(ctx, &pbresource.WatchListRequest{Type: scheduler.DeploymentType, Tenancy: &pbresource.Tenancy{Namespace: ns}})
	if err != nil {
		return nil, err
	}
	w := &deploymentWatch{changes: newChanges(), latest: map[string]*pbscheduler.Deployment{}, endedAt: map[string]time.Time{}}
	snapshot := true
	for snapshot {
		ev, err := stream.Recv()
		if err != nil {
			return nil, fmt.Errorf("deployment watch: %w", err)
		}
		switch ev.GetOp() {
		case pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
			snapshot = false
		case pbresource.WatchEvent_OP_UPSERT:
			w.observe(ev.GetResource(), time.Now())
		}
	}
	followUpserts(stream, w.observe, func(err error) {
		w.end(fmt.Errorf("deployment watch: %w: %v", errWatchEnded, err))
	})
	return w, nil
}

func (w *deploymentWatch) observe(res *pbresource.Resource, at time.Time) {
	// Its request merged with the scheduler's progress, which is in the
	// deployment's status.
	d, err := scheduler.DecodeDeployment(res)
	if err != nil {
		return
	}
	id := res.GetId().GetName()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.latest[id] = d
	if finalStatus(d.GetStatus()) {
		if _, ok := w.endedAt[id]; !ok {
			w.endedAt[id] = at
		}
	}
	w.broadcastLocked()
}

// waitEnded waits until deployment id reaches a final status and returns
// it with the time it was seen.
func (w *deploymentWatch) waitEnded(ctx context.Context, id string, limit time.Duration) (*pbscheduler.Deployment, time.Time, error) {
	var d *pbscheduler.Deployment
	var at time.Time
	err := w.waitUntil(ctx, limit, func() bool {
		var ok bool
		at, ok = w.endedAt[id]
		d = w.latest[id]
		return ok
	}, func() error {
		if d == nil {
			return fmt.Errorf("deployment %s: not seen within %s", id, limit)
		}
		return fmt.Errorf("deployment %s: still %s (%d/%d complete) after %s", id, d.GetStatus(), d.GetComplete(), d.GetTotal(), limit)
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	return d, at, nil
}

// envTaskWatch follows one environment's tasks on the instances named
// prefix... through a WatchList stream of the Tasks, and records for each
// instance when a task of the environment was first seen RUNNING there,
// when the first such task died by itself (its container's exit, by the
// agent's clock), and when a task started after that death was first seen
// RUNNING: the replacement.
type envTaskWatch struct {
	env, prefix string

	changes
	firstRun    map[string]time.Time // instance → first RUNNING seen
	died        map[string]time.Time // instance → first death (container exit)
	replacedRun map[string]time.Time // instance → replacement RUNNING seen
}

func watchEnvTasks(ctx context.Context, cli pbresource.ResourceServiceClient, ns, env, prefix string) (*envTaskWatch, error) {
	stream, err := cli.WatchList(ctx, &pbresource.WatchListRequest{Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: ns}})
	if err != nil {
		return nil, err
	}
	if err := skipSnapshot(stream); err != nil {
		return nil, fmt.Errorf("task watch: %w", err)
	}
	w := &envTaskWatch{changes: newChanges(), env: env, prefix: prefix, firstRun: map[string]time.Time{}, died: map[string]time.Time{},
		replacedRun: map[string]time.Time{}}
	followUpserts(stream, w.observe, func(err error) {
		w.end(fmt.Errorf("task watch: %w: %v", errWatchEnded, err))
	})
	return w, nil
}

func (w *envTaskWatch) observe(res *pbresource.Resource, at time.Time) {
	var t pborch.Task
	if err := res.GetData().UnmarshalTo(&t); err != nil {
		return
	}
	inst := t.GetInstance()
	if t.GetEnvironment() != w.env || !strings.HasPrefix(inst, w.prefix) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	st := orchestrator.TaskStatusOf(res)
	switch st.GetLastStatus() {
	case orchestrator.StatusRunning:
		if _, ok := w.firstRun[inst]; !ok {
			w.firstRun[inst] = at
		}
		if d, ok := w.died[inst]; ok && st.GetStartedAt().AsTime().After(d) {
			if _, ok := w.replacedRun[inst]; !ok {
				w.replacedRun[inst] = at
			}
		}
	case orchestrator.StatusStopped:
		// Nothing stops a joined instance's task during the cell but its
		// own exit (the joining fleet's -exit-rate 1), so a task that ran
		// and stopped died by itself.
		if st.GetStartedAt() == nil {
			break
		}
		if _, ok := w.died[inst]; ok {
			break
		}
		end := st.GetStoppedAt().AsTime()
		for _, c := range st.GetContainers() {
			if c.GetFinishedAt() != nil {
				end = c.GetFinishedAt().AsTime()
			}
		}
		w.died[inst] = end
	}
	w.broadcastLocked()
}

// waitCounts waits until n instances have a first RUNNING task and n a
// replacement.
func (w *envTaskWatch) waitCounts(ctx context.Context, n int, limit time.Duration) error {
	var run, rep, died int
	return w.waitUntil(ctx, limit, func() bool {
		run, rep, died = len(w.firstRun), len(w.replacedRun), len(w.died)
		return run >= n && rep >= n
	}, func() error {
		return fmt.Errorf("after %s: %d of %d joined instances run the task, %d tasks died, %d replaced", limit, run, n, died, rep)
	})
}
