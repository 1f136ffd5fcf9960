package catalog_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	"trellis.dev/trellis/internal/catalog"
)

func TestDownVerdict(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0.Add(time.Hour)
	si := okInstance() // checks t1/app and t1 on i-1
	report := func(at time.Time, status string, names ...string) *pbcatalog.ChecksStatus {
		cs := &pbcatalog.ChecksStatus{ReportedAt: timestamppb.New(at)}
		for _, n := range names {
			cs.Checks = append(cs.Checks, &pbcatalog.CheckStatus{Name: n, Status: status, Output: catalog.AgentDownOutput + "i-1"})
		}
		cs.Health = catalog.Aggregate(cs.Checks)
		return cs
	}
	agent := report(t0, catalog.CheckPassing, "t1/app", "t1")
	verdict := report(t0, catalog.CheckCritical, "t1/app", "t1")
	for _, tc := range []struct {
		name            string
		si              *pbcatalog.ServiceInstance
		agent, servers  *pbcatalog.ChecksStatus
		down            bool
		wantNil         bool
		wantAt          time.Time
		wantHealth      string
		wantMergedAgent bool // the merged view is the agent's report
	}{
		{name: "up, no verdict", si: si, agent: agent, wantNil: true},
		{name: "down: over the agent's report, at its time", si: si, agent: agent, down: true, wantAt: t0, wantHealth: catalog.CheckCritical},
		{name: "down, no report: now", si: si, down: true, wantAt: now, wantHealth: catalog.CheckCritical},
		{name: "down, verdict stored", si: si, agent: agent, servers: verdict, down: true, wantNil: true},
		{name: "down, a newer report: over it", si: si, agent: report(t0.Add(time.Minute), catalog.CheckPassing, "t1/app", "t1"), servers: verdict, down: true, wantAt: t0.Add(time.Minute), wantHealth: catalog.CheckCritical},
		{name: "back up: withdrawn", si: si, agent: agent, servers: verdict, wantAt: t0.Add(-time.Nanosecond), wantHealth: catalog.CheckPassing, wantMergedAgent: true},
		{name: "back up, reported since", si: si, agent: report(t0.Add(time.Minute), catalog.CheckPassing, "t1/app", "t1"), servers: verdict, wantNil: true},
		{name: "from outside: the TTL checks' business", si: okExternal(), down: true, wantNil: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := catalog.DownVerdict(tc.si, tc.agent, tc.servers, tc.down, now)
			if tc.wantNil {
				if got != nil {
					t.Fatalf("wrote %v", got)
				}
				return
			}
			if got == nil {
				t.Fatal("nothing written")
			}
			if err := catalog.ValidateChecksStatus(got); err != nil {
				t.Fatalf("an invalid verdict: %v", err)
			}
			if !got.GetReportedAt().AsTime().Equal(tc.wantAt) || got.GetHealth() != tc.wantHealth {
				t.Fatalf("verdict at %v health %s, want %v %s", got.GetReportedAt().AsTime(), got.GetHealth(), tc.wantAt, tc.wantHealth)
			}
			merged := catalog.MergeHealth(tc.si, tc.agent, got)
			if tc.wantMergedAgent {
				if merged.GetHealth() != tc.agent.GetHealth() {
					t.Fatalf("merged %v: want the agent's report", merged)
				}
				return
			}
			if merged.GetHealth() != catalog.CheckCritical || len(merged.GetChecks()) != len(tc.si.GetChecks()) {
				t.Fatalf("merged %v: want every check critical", merged)
			}
			// Idempotent: the verdict stored, nothing more to write.
			if again := catalog.DownVerdict(tc.si, tc.agent, got, tc.down, now.Add(time.Minute)); again != nil {
				t.Fatalf("judged again: %v", again)
			}
		})
	}
}
