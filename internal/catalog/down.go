package catalog

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
)

// AgentDownOutput begins the output of every check of an instance whose
// agent is down, in the servers' verdict (DownVerdict); the instance's
// name follows.
const AgentDownOutput = "the agent is down, so the checks cannot be known: instance "

// DownVerdict is the health controller's decision for an instance of a
// task (si.instance set): what the servers say of its checks
// (ServerChecksStatusKey), given its agent's report (agent; nil: none),
// the servers' word as stored (servers; nil: none), and whether the
// Instance it runs on is down (its agent marked down, or the Instance
// gone). It returns the report to write, or nil when nothing changes.
//
// While the agent is down, the agent cannot say that its tasks stopped:
// every defined check is critical, so that traffic leaves the instance.
// The verdict is stamped with the time of the agent report it overrides
// (MergeHealth gives a tie to the servers), so that the agent's next
// report, which is newer, wins again by itself. Once the agent is up
// again, a verdict that still overrides its report is withdrawn: stamped
// just before that report and with no checks, so that the report shows
// (it was true when it was made, and the agent writes every change it
// could not write while it was away). An instance registered from outside
// has no agent: nothing to do (its TTL checks are ExpireTTLChecks'). It is
// pure; it never changes its arguments.
func DownVerdict(si *pbcatalog.ServiceInstance, agent, servers *pbcatalog.ChecksStatus, down bool, now time.Time) *pbcatalog.ChecksStatus {
	if si.GetInstance() == "" {
		return nil
	}
	if !down {
		if len(servers.GetChecks()) == 0 || agent == nil || servers.GetReportedAt().AsTime().Before(agent.GetReportedAt().AsTime()) {
			return nil // no verdict, or the agent's report wins already
		}
		return &pbcatalog.ChecksStatus{Health: CheckPassing, ReportedAt: timestamppb.New(agent.GetReportedAt().AsTime().Add(-time.Nanosecond))}
	}
	stamp := timestamppb.New(now)
	switch {
	case agent != nil:
		stamp = agent.GetReportedAt()
	case len(servers.GetChecks()) > 0:
		stamp = servers.GetReportedAt() // a verdict over no report: keep its time
	}
	output := AgentDownOutput + si.GetInstance()
	next := &pbcatalog.ChecksStatus{Health: CheckPassing, ReportedAt: stamp}
	for _, def := range si.GetChecks() {
		next.Checks = append(next.Checks, &pbcatalog.CheckStatus{Name: def.GetName(), Status: CheckCritical, Output: output, ChangedAt: timestamppb.New(now)})
	}
	next.Health = Aggregate(next.Checks)
	if sameVerdict(servers, next) {
		return nil
	}
	return next
}

// sameVerdict says whether a stored report says what next says: the same
// time, and the same checks with the same statuses and outputs (when they
// changed aside).
func sameVerdict(stored, next *pbcatalog.ChecksStatus) bool {
	if stored == nil || !stored.GetReportedAt().AsTime().Equal(next.GetReportedAt().AsTime()) || len(stored.GetChecks()) != len(next.GetChecks()) {
		return false
	}
	for i, c := range stored.GetChecks() {
		n := next.GetChecks()[i]
		if c.GetName() != n.GetName() || c.GetStatus() != n.GetStatus() || c.GetOutput() != n.GetOutput() {
			return false
		}
	}
	return true
}
