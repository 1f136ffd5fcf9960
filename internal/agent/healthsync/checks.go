package healthsync

import (
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/orchestrator"
)

// Outputs of the checks health-sync writes that no health check said.
const (
	// StoppingOutput begins the output of every check of a task that is
	// stopping or has stopped; the stop reason follows when it is known.
	StoppingOutput = "the task is stopping"
	// NotStartedOutput is a container's check before the container runs.
	NotStartedOutput = "the container has not started"
)

// Report is the agent's report of an instance's checks (the payload of
// catalog.AgentChecksStatusKey) for the task called task, whose health is
// h, at now; prev is the report last written (nil: none). It returns nil
// when the report would say what prev says (every check's status and
// output the same): nothing to write.
//
// Each of the instance's check definitions gets a status:
//   - "<task>/<container>" is that container's health, judged by
//     catalog.CheckStatusOf (only healthy passes), with its health check's
//     output;
//   - any other name is the task's own check (a task whose containers
//     have no health check): the task's health, passing while it runs;
//   - every check is critical once the task stops or is stopping, so that
//     traffic leaves it before its containers exit.
//
// A change of outputs alone (a probe that answers with a time, say) is
// written only once outputEvery has passed since prev was reported, as
// Consul's check_update_interval does: a status change is written at once
// and carries the outputs with it. A check keeps its changed_at while its
// status does not change. It is pure; it never changes prev.
func Report(si *pbcatalog.ServiceInstance, task string, h component.TaskHealth, prev *pbcatalog.ChecksStatus, now time.Time, outputEvery time.Duration) *pbcatalog.ChecksStatus {
	before := make(map[string]*pbcatalog.CheckStatus, len(prev.GetChecks()))
	for _, c := range prev.GetChecks() {
		before[c.GetName()] = c
	}
	containers := make(map[string]component.ContainerHealth, len(h.Containers))
	for _, c := range h.Containers {
		containers[c.Name] = c
	}
	at := timestamppb.New(now)
	next := &pbcatalog.ChecksStatus{ReportedAt: at}
	same := prev != nil && len(prev.GetChecks()) == len(si.GetChecks())
	outputOnly := same // only outputs differ, so far
	for _, def := range si.GetChecks() {
		status, output := checkOf(def.GetName(), task, h, containers)
		c := &pbcatalog.CheckStatus{Name: def.GetName(), Status: status, Output: truncate(output), ChangedAt: at, CheckedAt: at}
		if old, ok := before[c.Name]; ok && old.GetStatus() == c.Status {
			c.ChangedAt = old.GetChangedAt()
			if old.GetOutput() != c.Output {
				same = false
			}
		} else {
			same, outputOnly = false, false
		}
		next.Checks = append(next.Checks, c)
	}
	if same || outputOnly && now.Before(prev.GetReportedAt().AsTime().Add(outputEvery)) {
		return nil
	}
	next.Health = catalog.Aggregate(next.Checks)
	return next
}

// checkOf is the status and output of the check called name.
func checkOf(name, task string, h component.TaskHealth, containers map[string]component.ContainerHealth) (string, string) {
	if h.Stopping {
		if h.StopReason != "" {
			return catalog.CheckCritical, StoppingOutput + ": " + h.StopReason
		}
		return catalog.CheckCritical, StoppingOutput
	}
	container, ok := strings.CutPrefix(name, task+"/")
	if !ok {
		return catalog.CheckStatusOf(h.Health), taskOutput(h)
	}
	c, ok := containers[container]
	if !ok || c.Health == "" {
		return catalog.CheckCritical, NotStartedOutput
	}
	out := c.Output
	if out == "" {
		out = "the container is " + c.Health
	}
	return catalog.CheckStatusOf(c.Health), out
}

func taskOutput(h component.TaskHealth) string {
	switch h.Health {
	case orchestrator.TaskHealthy:
		return "the task is running"
	case "":
		return "the task is " + strings.ToLower(h.Status)
	}
	return "the task is running and " + h.Health
}

// truncate makes an output what the catalog keeps: valid UTF-8, bounded
// on a rune boundary.
func truncate(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= catalog.MaxCheckOutputLength {
		return s
	}
	s = s[:catalog.MaxCheckOutputLength]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
