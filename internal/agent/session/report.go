package session

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

// maxReportBatch bounds one WriteBatch, well within the resource
// service's limits (resource.MaxBatchMembers, MaxBatchSize) even for
// tasks with many containers.
const maxReportBatch = 256

// reportLoop writes dirty tasks: after a change it waits ReportDelay for
// more, then writes everything dirty in one batch. Changes made while a
// batch is in flight go in the next one, at once.
func (c *conn) reportLoop(ctx context.Context) error {
	s := c.s
	for {
		batch := s.tasks.Reports()
		if len(batch) > 0 {
			if err := c.writeReports(ctx, batch); err != nil {
				return fmt.Errorf("report: %w", err)
			}
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.tasks.ReportsWaiting():
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.clock.After(s.cfg.ReportDelay):
		}
	}
}

// writeReports writes the reports in batches. A batch is atomic, so one
// stale member fails it: then every member is read again (merging happens
// on the next collect, over what is stored now) and the loop goes round.
// A batch refused as invalid is written member by member, so that one bad
// report cannot hold back the others.
func (c *conn) writeReports(ctx context.Context, batch []Report) error {
	for len(batch) > 0 {
		n := min(len(batch), maxReportBatch)
		chunk := batch[:n]
		batch = batch[n:]
		members := make([]*pbresource.Resource, n)
		for i, p := range chunk {
			members[i] = p.Resource
		}
		wctx, cancel := context.WithTimeout(ctx, c.s.cfg.RPCTimeout)
		resp, err := c.res.WriteBatch(wctx, &pbresource.WriteBatchRequest{Resources: members})
		cancel()
		switch status.Code(err) {
		case codes.OK:
			for i, p := range chunk {
				c.s.written(p, resp.GetResources()[i])
			}
		case codes.Aborted:
			if err := c.reread(ctx, chunk); err != nil {
				return err
			}
		case codes.InvalidArgument, codes.FailedPrecondition, codes.ResourceExhausted:
			if err := c.writeEach(ctx, chunk); err != nil {
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
func (c *conn) writeEach(ctx context.Context, chunk []Report) error {
	for _, p := range chunk {
		wctx, cancel := context.WithTimeout(ctx, c.s.cfg.RPCTimeout)
		resp, err := c.res.Write(wctx, &pbresource.WriteRequest{Resource: p.Resource})
		cancel()
		switch status.Code(err) {
		case codes.OK:
			c.s.written(p, resp.GetResource())
		case codes.Aborted:
			return c.reread(ctx, []Report{p})
		case codes.InvalidArgument, codes.FailedPrecondition, codes.ResourceExhausted:
			c.s.log.Error("the servers refused a task report; dropping it", "task", taskKey(p.Resource), "err", err)
			c.s.written(p, nil)
		default:
			return err
		}
	}
	return nil
}

// reread reads the tasks of a refused batch again and takes in what the
// store has.
func (c *conn) reread(ctx context.Context, chunk []Report) error {
	for _, p := range chunk {
		id := proto.Clone(p.Resource.GetId()).(*pbresource.ID)
		id.Uid = ""
		rctx, cancel := context.WithTimeout(ctx, c.s.cfg.RPCTimeout)
		// From the leader: a server behind it could call the task
		// deleted, and the agent would stop it for a deletion that did not
		// happen.
		resp, err := c.res.Read(rctx, &pbresource.ReadRequest{Id: id, Consistent: true})
		cancel()
		switch status.Code(err) {
		case codes.OK:
			got := resp.GetResource()
			c.s.sawVersion(got)
			if got.GetId().GetUid() != p.Resource.GetId().GetUid() {
				// Deleted and created again: a different task.
				c.s.tasks.Observe(p.Resource, true)
			}
			c.s.tasks.Observe(got, false)
		case codes.NotFound:
			c.s.tasks.Observe(p.Resource, true)
		default:
			return err
		}
	}
	return nil
}

// written records that the store took a report (stored: what it stored;
// nil when the report was dropped).
func (s *Session) written(r Report, stored *pbresource.Resource) {
	if stored != nil {
		// The task stream does not echo the agent's own reports: the
		// agent's view includes them from here.
		s.sawVersion(stored)
	}
	s.tasks.Written(r, stored)
}

func taskKey(res *pbresource.Resource) string {
	return res.GetId().GetTenancy().GetNamespace() + "/" + res.GetId().GetName()
}
