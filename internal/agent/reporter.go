package agent

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// maxReportBatch bounds one WriteBatch, well within the resource
// service's limits (resource.MaxBatchMembers, MaxBatchSize) even for
// tasks with many containers.
const maxReportBatch = 256

// pendingReport is one task's report, ready to write.
type pendingReport struct {
	t   *task
	seq uint64
	res *pbresource.Resource
}

// reportLoop writes dirty tasks: after a change it waits ReportDelay for
// more, then writes everything dirty in one batch. Changes made while a
// batch is in flight go in the next one, at once.
func (s *session) reportLoop(ctx context.Context) error {
	a := s.a
	for {
		batch := a.collectReports()
		if len(batch) > 0 {
			if err := s.writeReports(ctx, batch); err != nil {
				return fmt.Errorf("report: %w", err)
			}
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-a.reportCh:
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-a.clock.After(a.cfg.ReportDelay):
		}
	}
}

// collectReports builds the report of every dirty task, STOPPED reports
// first. A task whose environment has another task stopped here with its
// STOPPED report not yet stored (the task it replaced) waits unless that
// report is in the same batch: the store never shows the two running.
func (a *Agent) collectReports() []pendingReport {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.clock.Now()
	var out []pendingReport
	for _, t := range a.tasks {
		if !t.dirty() {
			continue
		}
		if o := a.unreportedStopLocked(t); o != nil && !o.dirty() {
			continue // its turn comes once o's report is in
		}
		merged := mergeReport(t.stored, reportOf(t.snap, a.session), now)
		data, err := anypb.New(merged)
		if err != nil {
			a.log.Error("cannot encode a task report", "task", t.key(), "err", err)
			continue
		}
		out = append(out, pendingReport{t: t, seq: t.seq, res: &pbresource.Resource{
			Id:       t.res.GetId(),
			Owner:    t.res.GetOwner(),
			Metadata: t.res.GetMetadata(),
			Version:  t.res.GetVersion(),
			Data:     data,
		}})
	}
	slices.SortStableFunc(out, func(x, y pendingReport) int {
		return cmp.Compare(stoppedFirst(x.t), stoppedFirst(y.t))
	})
	return out
}

func stoppedFirst(t *task) int {
	if t.snap.Status == orchestrator.StatusStopped {
		return 0
	}
	return 1
}

// writeReports writes the reports in batches. A batch is atomic, so one
// stale member fails it: then every member is read again (merging happens
// on the next collect, over what is stored now) and the loop goes round.
// A batch refused as invalid is written member by member, so that one bad
// report cannot hold back the others.
func (s *session) writeReports(ctx context.Context, batch []pendingReport) error {
	for len(batch) > 0 {
		n := min(len(batch), maxReportBatch)
		chunk := batch[:n]
		batch = batch[n:]
		members := make([]*pbresource.Resource, n)
		for i, p := range chunk {
			members[i] = p.res
		}
		wctx, cancel := context.WithTimeout(ctx, s.a.cfg.RPCTimeout)
		resp, err := s.res.WriteBatch(wctx, &pbresource.WriteBatchRequest{Resources: members})
		cancel()
		switch status.Code(err) {
		case codes.OK:
			for i, p := range chunk {
				s.a.written(p, resp.GetResources()[i])
			}
		case codes.Aborted:
			if err := s.reread(ctx, chunk); err != nil {
				return err
			}
		case codes.InvalidArgument, codes.FailedPrecondition, codes.ResourceExhausted:
			if err := s.writeEach(ctx, chunk); err != nil {
				return err
			}
		default:
			return err
		}
	}
	return nil
}

// writeEach writes reports one by one, in order; refused ones are logged
// and dropped. A stale one ends the chunk: the rest are collected again,
// after it (a replacement's report never goes before the STOPPED report
// of the task it replaced).
func (s *session) writeEach(ctx context.Context, chunk []pendingReport) error {
	for _, p := range chunk {
		wctx, cancel := context.WithTimeout(ctx, s.a.cfg.RPCTimeout)
		resp, err := s.res.Write(wctx, &pbresource.WriteRequest{Resource: p.res})
		cancel()
		switch status.Code(err) {
		case codes.OK:
			s.a.written(p, resp.GetResource())
		case codes.Aborted:
			return s.reread(ctx, []pendingReport{p})
		case codes.InvalidArgument, codes.FailedPrecondition, codes.ResourceExhausted:
			s.a.log.Error("the servers refused a task report; dropping it", "task", p.t.key(), "err", err)
			s.a.written(p, nil)
		default:
			return err
		}
	}
	return nil
}

// reread reads the tasks of a refused batch again and takes in what the
// store has.
func (s *session) reread(ctx context.Context, chunk []pendingReport) error {
	for _, p := range chunk {
		id := proto.Clone(p.res.GetId()).(*pbresource.ID)
		id.Uid = ""
		rctx, cancel := context.WithTimeout(ctx, s.a.cfg.RPCTimeout)
		// From the leader: a server behind it could call the task
		// deleted, and the agent would stop it for a deletion that did not
		// happen.
		resp, err := s.res.Read(rctx, &pbresource.ReadRequest{Id: id, Consistent: true})
		cancel()
		switch status.Code(err) {
		case codes.OK:
			got := resp.GetResource()
			s.a.sawVersion(got)
			if got.GetId().GetUid() != p.res.GetId().GetUid() {
				// Deleted and created again: a different task.
				s.a.observe(ctx, s, p.res, true)
			}
			s.a.observe(ctx, s, got, false)
		case codes.NotFound:
			s.a.observe(ctx, s, p.res, true)
		default:
			return err
		}
	}
	return nil
}

// written records that the store took a report (stored: what it stored;
// nil when the report was dropped).
func (a *Agent) written(p pendingReport, stored *pbresource.Resource) {
	if stored != nil {
		// The task stream does not echo the agent's own reports: the
		// agent's view includes them from here.
		a.sawVersion(stored)
	}
	a.mu.Lock()
	t := p.t
	t.written = max(t.written, p.seq)
	if stored != nil && stored.GetId().GetUid() == t.uid && (!t.seen || stored.GetGeneration() >= t.res.GetGeneration()) {
		tk := &pborch.Task{}
		if err := stored.GetData().UnmarshalTo(tk); err == nil {
			t.res, t.stored, t.seen = stored, tk, true
		}
	}
	// The answer is what the store has now: a task whose STOPPED report
	// is in is done with.
	fx := a.reconcileLocked(t)
	a.mu.Unlock()
	a.apply(a.runCtx, nil, fx)
}

// reportedLocked: nothing of t is left to write.
func (t *task) reportedLocked() bool {
	return t.silent || t.deleted || !t.hasReport || t.written >= t.seq
}
