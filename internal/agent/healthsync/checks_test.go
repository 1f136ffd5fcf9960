package healthsync_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/agent/healthsync"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/orchestrator"
)

func TestReport(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	every := healthsync.DefaultOutputInterval
	si := &pbcatalog.ServiceInstance{Instance: "i-1", Task: "t1", Checks: []*pbcatalog.CheckDefinition{{Name: "t1/app"}, {Name: "t1/side"}, {Name: "t1"}}}
	pending := component.TaskHealth{Status: orchestrator.StatusPending}
	stopped := component.TaskHealth{Status: orchestrator.StatusStopped, Stopping: true, StopReason: "essential container app exited"}
	for _, tc := range []struct {
		name string
		h    component.TaskHealth
		want map[string]string // check → status
		out  map[string]string // check → output prefix
	}{
		{"running, app healthy, side unknown", running(container("app", healthy, "200"), container("side", orchestrator.TaskHealthUnknown, "")),
			map[string]string{"t1/app": passing, "t1/side": critical, "t1": critical}, map[string]string{"t1/app": "200"}},
		{"all healthy", running(container("app", healthy, "200"), container("side", healthy, "")),
			map[string]string{"t1/app": passing, "t1/side": passing, "t1": passing}, map[string]string{"t1/side": "the container is healthy", "t1": "the task is running"}},
		{"app unhealthy", running(container("app", sick, "503"), container("side", healthy, "")),
			map[string]string{"t1/app": critical, "t1/side": passing, "t1": critical}, map[string]string{"t1/app": "503"}},
		{"a container not started", running(container("app", healthy, "200")),
			map[string]string{"t1/app": passing, "t1/side": critical, "t1": passing}, map[string]string{"t1/side": healthsync.NotStartedOutput}},
		{"pending", pending, map[string]string{"t1/app": critical, "t1/side": critical, "t1": critical}, map[string]string{"t1": "the task is pending"}},
		{"stopped", stopped, map[string]string{"t1/app": critical, "t1/side": critical, "t1": critical},
			map[string]string{"t1/app": healthsync.StoppingOutput + ": essential container app exited"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := healthsync.Report(si, "t1", tc.h, nil, t0, every)
			if err := catalog.ValidateChecksStatus(got); err != nil {
				t.Fatalf("an invalid report: %v", err)
			}
			if len(got.GetChecks()) != len(si.GetChecks()) {
				t.Fatalf("%d checks, want one per definition", len(got.GetChecks()))
			}
			for _, c := range got.GetChecks() {
				if c.GetStatus() != tc.want[c.GetName()] {
					t.Errorf("%s: %s, want %s", c.GetName(), c.GetStatus(), tc.want[c.GetName()])
				}
				if p, ok := tc.out[c.GetName()]; ok && !strings.HasPrefix(c.GetOutput(), p) {
					t.Errorf("%s: output %q, want %q", c.GetName(), c.GetOutput(), p)
				}
			}
			// Said again later: nothing to write.
			if again := healthsync.Report(si, "t1", tc.h, got, t0.Add(time.Minute), every); again != nil {
				t.Errorf("an unchanged health written again: %v", again)
			}
		})
	}
	// A status that holds keeps its changed_at; one that changes moves it.
	first := healthsync.Report(si, "t1", running(container("app", healthy, "200"), container("side", healthy, "")), nil, t0, every)
	next := healthsync.Report(si, "t1", running(container("app", sick, "503"), container("side", healthy, "")), first, t0.Add(time.Minute), every)
	changed := map[string]*timestamppb.Timestamp{}
	for _, c := range next.GetChecks() {
		changed[c.GetName()] = c.GetChangedAt()
	}
	if !changed["t1/app"].AsTime().Equal(t0.Add(time.Minute)) || !changed["t1/side"].AsTime().Equal(t0) {
		t.Errorf("changed_at: %v", changed)
	}
	// An output the catalog would refuse is made valid.
	long := healthsync.Report(si, "t1", running(container("app", healthy, strings.Repeat("é", catalog.MaxCheckOutputLength)+"\xff"), container("side", healthy, "")), nil, t0, every)
	if err := catalog.ValidateChecksStatus(long); err != nil {
		t.Errorf("a long, invalid output: %v", err)
	}
	// Outputs alone changed: held until the output interval is up, then
	// written; a status change is written at once.
	newOutput := running(container("app", healthy, "200 at 12:01"), container("side", healthy, ""))
	if r := healthsync.Report(si, "t1", newOutput, first, t0.Add(time.Minute), every); r != nil {
		t.Errorf("an output-only change within the interval written: %v", r)
	}
	if r := healthsync.Report(si, "t1", newOutput, first, t0.Add(every), every); r == nil || r.GetChecks()[0].GetOutput() != "200 at 12:01" {
		t.Errorf("an output-only change once the interval is up: %v", r)
	}
	if r := healthsync.Report(si, "t1", newOutput, first, t0.Add(time.Minute), 0); r == nil {
		t.Error("an output-only change with no interval is not written")
	}
}
