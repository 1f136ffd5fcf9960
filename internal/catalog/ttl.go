package catalog

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
)

// ExpiredOutput begins the output of a TTL check that went critical
// because nobody refreshed it in time.
const ExpiredOutput = "TTL expired: not refreshed within "

// ExpireTTLChecks is the health controller's decision for an instance
// registered from outside Trellis, whose TTL checks the servers keep
// (ServerChecksStatusKey; servers is nil when none is reported): at now,
// every reported check that is not critical and was last refreshed
// (checked_at) at least its ttl ago goes critical. It returns the report
// to write (nil when nothing changes) and how long until the next check
// runs out (0 when none will: every check is critical or unreported).
// An instance of a task is its agent's to report: nothing to do. It is
// pure; it never changes servers.
func ExpireTTLChecks(si *pbcatalog.ServiceInstance, servers *pbcatalog.ChecksStatus, now time.Time) (*pbcatalog.ChecksStatus, time.Duration) {
	if si.GetInstance() != "" || servers == nil {
		return nil, 0
	}
	ttls := make(map[string]time.Duration, len(si.GetChecks()))
	for _, def := range si.GetChecks() {
		if def.GetTtl() != nil {
			ttls[def.GetName()] = def.GetTtl().AsDuration()
		}
	}
	var next *pbcatalog.ChecksStatus
	var wait time.Duration
	for i, c := range servers.GetChecks() {
		ttl, ok := ttls[c.GetName()]
		if !ok || c.GetStatus() == CheckCritical {
			continue
		}
		left := c.GetCheckedAt().AsTime().Add(ttl).Sub(now)
		if left > 0 {
			if wait == 0 || left < wait {
				wait = left
			}
			continue
		}
		if next == nil {
			next = &pbcatalog.ChecksStatus{Checks: make([]*pbcatalog.CheckStatus, len(servers.GetChecks()))}
			copy(next.Checks, servers.GetChecks())
		}
		next.Checks[i] = &pbcatalog.CheckStatus{
			Name:      c.GetName(),
			Status:    CheckCritical,
			Output:    ExpiredOutput + ttl.String(),
			ChangedAt: timestamppb.New(now),
			CheckedAt: c.GetCheckedAt(),
		}
	}
	if next == nil {
		return nil, wait
	}
	next.Health = Aggregate(next.Checks)
	next.ReportedAt = timestamppb.New(now)
	return next, wait
}
