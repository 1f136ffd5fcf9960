package session

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
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
			wrote, err := c.writeReports(ctx, batch)
			if err != nil {
				return fmt.Errorf("report: %w", err)
			}
			if wrote {
				continue
			}
			// Nothing could be written (each report waits for one that is
			// not in the batch): wait for a change rather than spin.
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

// writeReports writes the reports with WriteStatuses, in chunks. A report
// that must follow another (Report.After) goes with it, after it, in one
// request that says so (WriteStatusesRequest.follows): the store takes it
// only if it takes the one it follows, so a replacement's RUNNING and its
// predecessor's STOPPED are one Raft entry, not two. One whose
// predecessor is in an earlier chunk goes only if that one was stored; one
// whose predecessor is in no chunk waits for the next collect. A member
// refused as stale (Aborted) or gone (NotFound) is read again from the
// leader and handed to the task manager, which reports it again on the
// next collect, over what is stored now. A request refused as a whole as
// invalid is written member by member, in order, so that one bad report
// cannot hold back the others.
//
// wrote says whether any report was sent.
func (c *conn) writeReports(ctx context.Context, batch []Report) (wrote bool, err error) {
	ordered := followOrder(batch)
	stored := make(map[string]bool)
	for len(ordered) > 0 {
		n := min(len(ordered), maxReportBatch)
		var chunk []Report
		inChunk := make(map[string]int, n)
		for _, r := range ordered[:n] {
			if _, ok := inChunk[r.After]; r.After != "" && !ok && !stored[r.After] {
				continue // its predecessor was in an earlier chunk and not stored
			}
			inChunk[uidOf(r)] = len(chunk)
			chunk = append(chunk, r)
		}
		ordered = ordered[n:]
		if len(chunk) == 0 {
			continue
		}
		wrote = true
		if err := c.writeChunk(ctx, chunk, inChunk, stored); err != nil {
			return wrote, err
		}
	}
	return wrote, nil
}

// followOrder puts every report after the one it follows and drops those
// that follow a report not in the batch (they wait for the next collect).
// Reports() gives STOPPED reports first, which is already that order as a
// rule; this keeps it whatever the order given.
func followOrder(batch []Report) []Report {
	in := make(map[string]bool, len(batch))
	for _, r := range batch {
		in[uidOf(r)] = true
	}
	placed := make(map[string]bool, len(batch))
	out := make([]Report, 0, len(batch))
	for len(batch) > 0 {
		var rest []Report
		for _, r := range batch {
			switch {
			case r.After == "" || placed[r.After]:
				placed[uidOf(r)] = true
				out = append(out, r)
			case in[r.After]:
				rest = append(rest, r)
			}
		}
		if len(rest) == len(batch) {
			break // a cycle: nothing more can go
		}
		batch = rest
	}
	return out
}

// writeChunk writes one WriteStatuses request; inChunk maps a report's uid
// to its index in the chunk, and stored collects the uids of the reports
// the store took.
func (c *conn) writeChunk(ctx context.Context, chunk []Report, inChunk map[string]int, stored map[string]bool) error {
	members := make([]*pbresource.WriteStatusRequest, len(chunk))
	var follows map[uint32]uint32
	for i, p := range chunk {
		members[i] = p.Request
		if j, ok := inChunk[p.After]; ok && p.After != "" {
			if follows == nil {
				follows = make(map[uint32]uint32)
			}
			follows[uint32(i)] = uint32(j)
		}
	}
	wctx, cancel := context.WithTimeout(c.s.asAgent(ctx), c.s.cfg.RPCTimeout)
	resp, err := c.res.WriteStatuses(wctx, &pbresource.WriteStatusesRequest{Statuses: members, Follows: follows})
	cancel()
	switch status.Code(err) {
	case codes.OK:
	case codes.InvalidArgument, codes.FailedPrecondition, codes.ResourceExhausted:
		return c.writeEach(ctx, chunk, stored)
	default:
		return err
	}
	var reread []Report
	for i, p := range chunk {
		res, err := resource.StatusResult(resp.GetResults()[i])
		switch status.Code(err) {
		case codes.OK:
			stored[uidOf(p)] = true
			c.s.written(p, res)
		case codes.Aborted, codes.NotFound:
			reread = append(reread, p)
		default:
			c.s.log.Error("the servers refused a task report; dropping it", "task", taskKey(p), "err", err)
			c.s.written(p, nil)
		}
	}
	return c.reread(ctx, reread)
}

// writeEach writes reports one by one, in order; refused ones are logged
// and dropped. One whose predecessor was not stored waits for the next
// collect.
func (c *conn) writeEach(ctx context.Context, chunk []Report, stored map[string]bool) error {
	for _, p := range chunk {
		if p.After != "" && !stored[p.After] {
			continue
		}
		wctx, cancel := context.WithTimeout(c.s.asAgent(ctx), c.s.cfg.RPCTimeout)
		resp, err := c.res.WriteStatus(wctx, p.Request)
		cancel()
		switch status.Code(err) {
		case codes.OK:
			stored[uidOf(p)] = true
			c.s.written(p, resp.GetResource())
		case codes.Aborted, codes.NotFound:
			if err := c.reread(ctx, []Report{p}); err != nil {
				return err
			}
		case codes.InvalidArgument, codes.FailedPrecondition, codes.ResourceExhausted:
			c.s.log.Error("the servers refused a task report; dropping it", "task", taskKey(p), "err", err)
			c.s.written(p, nil)
		default:
			return err
		}
	}
	return nil
}

// reread reads the tasks of refused reports again and hands the task
// manager what the store has.
func (c *conn) reread(ctx context.Context, reports []Report) error {
	for _, p := range reports {
		id := proto.Clone(p.Request.GetId()).(*pbresource.ID)
		id.Uid = ""
		rctx, cancel := context.WithTimeout(ctx, c.s.cfg.RPCTimeout)
		// From the leader: a server behind it could call the task
		// deleted, and the agent would stop it for a deletion that did not
		// happen.
		resp, err := c.res.Read(rctx, &pbresource.ReadRequest{Id: id, Consistent: true})
		cancel()
		gone := &pbresource.Resource{Id: p.Request.GetId()}
		switch status.Code(err) {
		case codes.OK:
			got := resp.GetResource()
			c.s.sawVersion(got)
			if got.GetId().GetUid() != uidOf(p) {
				// Deleted and created again: a different task.
				c.s.observe(gone, true)
			}
			c.s.observe(got, false)
		case codes.NotFound:
			c.s.observe(gone, true)
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
		s.held.stored(stored)
	}
	s.tasks.Written(r, stored)
}

func uidOf(r Report) string { return r.Request.GetId().GetUid() }

func taskKey(r Report) string {
	id := r.Request.GetId()
	return id.GetTenancy().GetNamespace() + "/" + id.GetName()
}

// asAgent names the instance and its session in the call's metadata: the
// servers take a report for its agent's (which alone may write a task's
// status["agent"]) by the agent's Connect leaf when it presents one, else
// by this pair, when the session is the one the Instance holds.
func (s *Session) asAgent(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, resource.AgentInstanceMetadataKey, s.cfg.Name, resource.AgentSessionMetadataKey, s.ID())
}
