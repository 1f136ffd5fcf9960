package catalog

import (
	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// A check's status, and an instance's aggregate health: Consul's words,
// which the tools that read a catalog (its API, DNS, consul-template)
// expect.
const (
	CheckPassing  = "passing"
	CheckWarning  = "warning"
	CheckCritical = "critical"
)

// CheckStatuses lists a check's statuses from the best to the worst.
var CheckStatuses = []string{CheckPassing, CheckWarning, CheckCritical}

// NotReportedOutput is the output of a defined check of which no status
// has been reported: it counts as critical, as Consul registers a check,
// so that an instance gets no traffic before its health is known.
const NotReportedOutput = "no status reported yet"

// CheckStatusOf maps a task's or a container's health, in the one
// vocabulary every view of the orchestrator shows (orchestrator.TaskHealth
// and orchestrator.ContainerHealth: healthy, unhealthy, unknown, or ""
// for a task that does not run), onto a catalog check's status. It is the
// one place the two vocabularies meet: health-sync reports every check
// through it.
//
// Only healthy passes. Unknown is critical: a check that has not passed
// yet, or a task whose instance stopped reporting (LOST), must not get
// traffic; and a task that does not run is critical. Nothing a task
// reports is a warning: warning is a TTL check's, set by whoever
// refreshes it.
func CheckStatusOf(health string) string {
	if health == orchestrator.TaskHealthy {
		return CheckPassing
	}
	return CheckCritical
}

// Aggregate is the health of an instance with checks: the worst of their
// statuses, passing when it has none (an unknown status counts as
// critical).
func Aggregate(checks []*pbcatalog.CheckStatus) string {
	worst := CheckPassing
	for _, c := range checks {
		switch c.GetStatus() {
		case CheckPassing:
		case CheckWarning:
			if worst == CheckPassing {
				worst = CheckWarning
			}
		default:
			return CheckCritical
		}
	}
	return worst
}

// AgentChecksOf is the checks' status as the instance's agent last
// reported it (status["agent"]); nil when none is, or it does not decode.
func AgentChecksOf(res *pbresource.Resource) *pbcatalog.ChecksStatus {
	return checksOf(res, AgentChecksStatusKey)
}

// ServerChecksOf is the servers' word on the checks
// (status["catalog-health"]); nil when none is, or it does not decode.
func ServerChecksOf(res *pbresource.Resource) *pbcatalog.ChecksStatus {
	return checksOf(res, ServerChecksStatusKey)
}

func checksOf(res *pbresource.Resource, key string) *pbcatalog.ChecksStatus {
	if st := res.GetStatus()[key]; st.GetData() != nil {
		cs := &pbcatalog.ChecksStatus{}
		if err := st.GetData().UnmarshalTo(cs); err == nil {
			return cs
		}
	}
	return nil
}

// HealthOf is a stored ServiceInstance's health as every reader sees it
// (DNS, the catalog's routes, the proxies' endpoints): MergeHealth of its
// check definitions and its two status keys. It returns nil when the data
// does not decode.
func HealthOf(res *pbresource.Resource) *pbcatalog.ChecksStatus {
	si, err := resource.DecodeData[*pbcatalog.ServiceInstance](res)
	if err != nil {
		return nil
	}
	return MergeHealth(si, AgentChecksOf(res), ServerChecksOf(res))
}

// MergeHealth is the one view of an instance's health, from its data, its
// agent's report (nil: none) and the servers' word (nil: none). The newer
// report wins, a tie going to the servers: their verdict on a down agent
// names the time of the report it was made over, and holds until the
// agent reports again. An instance registered from outside has no agent:
// the servers' word (its TTL checks) is all there is. The view has one
// check per definition, in the order of the definitions; a definition the
// winning report does not name is critical (NotReportedOutput), and what
// a report says of checks not defined is left out. Its reported_at is the
// winning report's. It is pure; the view shares the reports' checks, which
// must not be changed.
func MergeHealth(si *pbcatalog.ServiceInstance, agent, servers *pbcatalog.ChecksStatus) *pbcatalog.ChecksStatus {
	report := agent
	if si.GetInstance() == "" || servers != nil && (agent == nil || !servers.GetReportedAt().AsTime().Before(agent.GetReportedAt().AsTime())) {
		report = servers
	}
	byName := make(map[string]*pbcatalog.CheckStatus, len(report.GetChecks()))
	for _, c := range report.GetChecks() {
		byName[c.GetName()] = c
	}
	out := &pbcatalog.ChecksStatus{ReportedAt: report.GetReportedAt()}
	for _, def := range si.GetChecks() {
		if c, ok := byName[def.GetName()]; ok {
			out.Checks = append(out.Checks, c)
			continue
		}
		out.Checks = append(out.Checks, &pbcatalog.CheckStatus{Name: def.GetName(), Status: CheckCritical, Output: NotReportedOutput})
	}
	out.Health = Aggregate(out.Checks)
	return out
}
