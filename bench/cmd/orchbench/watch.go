package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// errWatchEnded: the watch stream failed; what it would have shown is
// unknown.
var errWatchEnded = errors.New("the watch stream ended")

// taskWatch follows the Tasks of one namespace through one WatchList
// stream and tells waiters when a task reaches RUNNING or ends. Times are
// taken as each event is received.
type taskWatch struct {
	mu      sync.Mutex
	waiters map[string]*taskWait
	err     error
	failed  chan struct{}
}

// taskWait is what one task's waiter learns.
type taskWait struct {
	running chan struct{} // closed at the first RUNNING report, or at the end
	ended   chan struct{} // closed at STOPPED or LOST
	runAt   time.Time     // when RUNNING was seen; zero if it never was
	// startedAt and reportedAt are what the RUNNING report says: when the
	// agent saw the task running, and when it collected the report.
	startedAt, reportedAt time.Time
	status                string
	reason                string
}

// watchTasks opens the watch and returns once its snapshot is in.
func watchTasks(ctx context.Context, cli pbresource.ResourceServiceClient, ns string) (*taskWatch, error) {
	stream, err := cli.WatchList(ctx, &pbresource.WatchListRequest{Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: ns}})
	if err != nil {
		return nil, err
	}
	if err := skipSnapshot(stream); err != nil {
		return nil, fmt.Errorf("task watch: %w", err)
	}
	w := &taskWatch{waiters: map[string]*taskWait{}, failed: make(chan struct{})}
	followUpserts(stream, w.observe, func(err error) {
		w.mu.Lock()
		w.err = fmt.Errorf("%w: %v", errWatchEnded, err)
		w.mu.Unlock()
		close(w.failed)
	})
	return w, nil
}

// skipSnapshot reads the stream's snapshot to its end, for a watch that
// follows only what changes after it.
func skipSnapshot(stream pbresource.ResourceService_WatchListClient) error {
	for {
		ev, err := stream.Recv()
		if err != nil {
			return err
		}
		if ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
			return nil
		}
	}
}

// followUpserts hands observe every upsert stream delivers, with when it
// arrived, until the stream fails; ended then gets the error.
func followUpserts(stream pbresource.ResourceService_WatchListClient, observe func(*pbresource.Resource, time.Time), ended func(error)) {
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				ended(err)
				return
			}
			if ev.GetOp() == pbresource.WatchEvent_OP_UPSERT {
				observe(ev.GetResource(), time.Now())
			}
		}
	}()
}

func (w *taskWatch) observe(res *pbresource.Resource, at time.Time) {
	var t pborch.Task
	if err := res.GetData().UnmarshalTo(&t); err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	tw := w.waiters[res.GetId().GetName()]
	if tw == nil {
		return
	}
	st := orchestrator.TaskStatusOf(res)
	tw.status = st.GetLastStatus()
	switch st.GetLastStatus() {
	case orchestrator.StatusRunning:
		if tw.runAt.IsZero() {
			tw.runAt = at
			tw.startedAt = st.GetStartedAt().AsTime()
			tw.reportedAt = st.GetReportedAt().AsTime()
			close(tw.running)
		}
	case orchestrator.StatusStopped, orchestrator.StatusLost:
		select {
		case <-tw.ended:
			return
		default:
		}
		tw.reason = orchestrator.TaskStopReason(&t, st)
		if tw.runAt.IsZero() {
			close(tw.running)
		}
		close(tw.ended)
	}
}

// expect registers a waiter for name; call it before writing the task so
// that no event can be missed.
func (w *taskWatch) expect(name string) *taskWait {
	tw := &taskWait{running: make(chan struct{}), ended: make(chan struct{})}
	w.mu.Lock()
	w.waiters[name] = tw
	w.mu.Unlock()
	return tw
}

func (w *taskWatch) forget(name string) {
	w.mu.Lock()
	delete(w.waiters, name)
	w.mu.Unlock()
}

// waitRunning waits for the task's RUNNING report and returns when it was
// seen.
func (w *taskWatch) waitRunning(ctx context.Context, name string, tw *taskWait, limit time.Duration) (time.Time, error) {
	if err := w.wait(ctx, tw.running, limit); err != nil {
		return time.Time{}, fmt.Errorf("task %s: no RUNNING report: %w", name, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if tw.runAt.IsZero() {
		return time.Time{}, fmt.Errorf("task %s ended %s before it ran: %s", name, tw.status, tw.reason)
	}
	return tw.runAt, nil
}

func (w *taskWatch) wait(ctx context.Context, ch <-chan struct{}, limit time.Duration) error {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-w.failed:
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("not within %s", limit)
	}
}

// instanceWatch follows Instances through one WatchList stream: the
// current status of each, and when each was first seen down.
type instanceWatch struct {
	changes
	status  map[string]string
	downAt  map[string]time.Time
	readyAt map[string]time.Time // when each was first seen ready
	downs   int                  // transitions to down seen, ever
}

func watchInstances(ctx context.Context, cli pbresource.ResourceServiceClient) (*instanceWatch, error) {
	stream, err := cli.WatchList(ctx, &pbresource.WatchListRequest{Type: orchestrator.InstanceType, Tenancy: &pbresource.Tenancy{}})
	if err != nil {
		return nil, err
	}
	w := &instanceWatch{changes: newChanges(), status: map[string]string{}, downAt: map[string]time.Time{}, readyAt: map[string]time.Time{}}
	followUpserts(stream, w.observe, func(err error) {
		w.end(fmt.Errorf("instance watch: %w: %v", errWatchEnded, err))
	})
	return w, nil
}

func (w *instanceWatch) observe(res *pbresource.Resource, at time.Time) {
	var raw pborch.Instance
	if err := res.GetData().UnmarshalTo(&raw); err != nil {
		return
	}
	in := orchestrator.InstanceOf(res, &raw) // down is the servers' verdict
	name := res.GetId().GetName()
	w.mu.Lock()
	defer w.mu.Unlock()
	if in.GetStatus() == orchestrator.InstanceDown && w.status[name] != orchestrator.InstanceDown {
		w.downs++
		w.downAt[name] = at
	}
	if _, ok := w.readyAt[name]; !ok && in.GetStatus() == orchestrator.InstanceReady {
		w.readyAt[name] = at
	}
	w.status[name] = in.GetStatus()
	w.broadcastLocked()
}

// countReady is how many instances named prefix... are ready (under lock).
func (w *instanceWatch) countReady(prefix string) int {
	n := 0
	for name, st := range w.status {
		if st == orchestrator.InstanceReady && strings.HasPrefix(name, prefix) {
			n++
		}
	}
	return n
}

func (w *instanceWatch) waitReady(ctx context.Context, prefix string, n int, limit time.Duration) error {
	err := w.waitUntil(ctx, limit, func() bool { return w.countReady(prefix) >= n }, notWithin(limit))
	if err != nil {
		w.mu.Lock()
		got := w.countReady(prefix)
		w.mu.Unlock()
		return fmt.Errorf("%d of %d instances %s* ready: %w", got, n, prefix, err)
	}
	return nil
}

// waitDown waits until name is down and returns when that was seen.
func (w *instanceWatch) waitDown(ctx context.Context, name string, limit time.Duration) (time.Time, error) {
	var at time.Time
	err := w.waitUntil(ctx, limit, func() bool {
		if w.status[name] != orchestrator.InstanceDown {
			return false
		}
		at = w.downAt[name]
		return true
	}, notWithin(limit))
	return at, err
}

func (w *instanceWatch) downCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.downs
}

// readyTimes is when each instance named prefix... was first seen ready.
func (w *instanceWatch) readyTimes(prefix string) map[string]time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]time.Time{}
	for name, at := range w.readyAt {
		if strings.HasPrefix(name, prefix) {
			out[name] = at
		}
	}
	return out
}
