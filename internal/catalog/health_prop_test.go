package catalog_test

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"pgregory.net/rapid"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	"trellis.dev/trellis/internal/catalog"
)

// Properties of the one view of an instance's health, over any
// definitions and any two reports: one check per definition, in their
// order; each the winning report's word or critical; the aggregate is
// the worst of them; the order of a report's checks does not matter; and
// an agent's key never speaks for an instance from outside.
func TestMergeHealthProperties(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	names := []string{"t1", "t1/app", "t1/db", "t1/cache"}
	rapid.Check(t, func(rt *rapid.T) {
		external := rapid.Bool().Draw(rt, "external")
		si := &pbcatalog.ServiceInstance{Service: "web", Address: "10.0.0.1", Port: 80}
		if !external {
			si.Instance, si.Task = "i-1", "t1"
		}
		for _, i := range rapid.Permutation([]int{0, 1, 2, 3}).Draw(rt, "order")[:rapid.IntRange(0, 4).Draw(rt, "defined")] {
			si.Checks = append(si.Checks, &pbcatalog.CheckDefinition{Name: names[i]})
		}
		report := func(label string) *pbcatalog.ChecksStatus {
			if !rapid.Bool().Draw(rt, label+" present") {
				return nil
			}
			cs := &pbcatalog.ChecksStatus{ReportedAt: timestamppb.New(t0.Add(time.Duration(rapid.IntRange(0, 3).Draw(rt, label+" at")) * time.Second))}
			for _, n := range names {
				if rapid.Bool().Draw(rt, label+" reports "+n) {
					cs.Checks = append(cs.Checks, &pbcatalog.CheckStatus{Name: n, Status: rapid.SampledFrom(catalog.CheckStatuses).Draw(rt, label+" "+n)})
				}
			}
			cs.Health = catalog.Aggregate(cs.Checks)
			return cs
		}
		agent, servers := report("agent"), report("servers")
		view := catalog.MergeHealth(si, agent, servers)

		winner := agent
		if external || servers != nil && (agent == nil || !servers.GetReportedAt().AsTime().Before(agent.GetReportedAt().AsTime())) {
			winner = servers
		}
		if len(view.GetChecks()) != len(si.GetChecks()) {
			rt.Fatalf("%d checks in the view, %d defined", len(view.GetChecks()), len(si.GetChecks()))
		}
		for i, c := range view.GetChecks() {
			if c.GetName() != si.GetChecks()[i].GetName() {
				rt.Fatalf("check %d is %s, defined %s", i, c.GetName(), si.GetChecks()[i].GetName())
			}
			want := catalog.CheckCritical
			for _, r := range winner.GetChecks() {
				if r.GetName() == c.GetName() {
					want = r.GetStatus()
				}
			}
			if c.GetStatus() != want {
				rt.Fatalf("check %s is %s, the winning report says %s", c.GetName(), c.GetStatus(), want)
			}
		}
		if view.GetHealth() != catalog.Aggregate(view.GetChecks()) {
			rt.Fatalf("health %s over %v", view.GetHealth(), view.GetChecks())
		}
		if winner != nil {
			if err := catalog.ValidateChecksStatus(view); err != nil {
				rt.Fatalf("the view is not a valid report: %v", err)
			}
		}
		// The order a report lists its checks in does not matter.
		if agent != nil {
			shuffled := proto.Clone(agent).(*pbcatalog.ChecksStatus)
			slices.Reverse(shuffled.Checks)
			if again := catalog.MergeHealth(si, shuffled, servers); !proto.Equal(again, view) {
				rt.Fatalf("reversing the agent's checks changed the view: %v, then %v", view, again)
			}
		}
		// An agent's word about an instance from outside is never heard.
		if external && !proto.Equal(view, catalog.MergeHealth(si, nil, servers)) {
			rt.Fatalf("an agent's key changed the health of an instance from outside: %v", view)
		}
	})
}
