package catalog_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	"trellis.dev/trellis/internal/catalog"
)

func TestRefreshTTLCheck(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ttl := durationpb.New(30 * time.Second)
	outside := &pbcatalog.ServiceInstance{Service: "db", Address: "10.0.0.9", Port: 5432,
		Checks: []*pbcatalog.CheckDefinition{{Name: "alive", Ttl: ttl}, {Name: "disk", Ttl: ttl}}}
	ofTask := &pbcatalog.ServiceInstance{Service: "api", Address: "10.0.0.1", Port: 80, Instance: "i-1", Task: "api-1",
		Checks: []*pbcatalog.CheckDefinition{{Name: "api-1"}}}

	// The first refresh reports the check alone; a second of the other
	// check keeps the first; the same status again keeps when it changed.
	r1, err := catalog.RefreshTTLCheck(outside, nil, "alive", catalog.CheckPassing, "ok", t0)
	if err != nil || len(r1.GetChecks()) != 1 || r1.GetHealth() != catalog.CheckPassing || !r1.GetReportedAt().AsTime().Equal(t0) {
		t.Fatalf("first refresh = %v, %v", r1, err)
	}
	t1 := t0.Add(10 * time.Second)
	r2, err := catalog.RefreshTTLCheck(outside, r1, "disk", catalog.CheckWarning, "90% full", t1)
	if err != nil || len(r2.GetChecks()) != 2 || r2.GetHealth() != catalog.CheckWarning || r2.GetChecks()[0] != r1.GetChecks()[0] {
		t.Fatalf("second refresh = %v, %v", r2, err)
	}
	t2 := t1.Add(10 * time.Second)
	r3, err := catalog.RefreshTTLCheck(outside, r2, "alive", catalog.CheckPassing, "still ok", t2)
	if err != nil {
		t.Fatal(err)
	}
	if c := r3.GetChecks()[0]; !c.GetChangedAt().AsTime().Equal(t0) || !c.GetCheckedAt().AsTime().Equal(t2) || c.GetOutput() != "still ok" {
		t.Fatalf("a refresh at the same status: %v", c)
	}
	r4, err := catalog.RefreshTTLCheck(outside, r3, "alive", catalog.CheckCritical, "", t2)
	if err != nil || !r4.GetChecks()[0].GetChangedAt().AsTime().Equal(t2) || r4.GetHealth() != catalog.CheckCritical {
		t.Fatalf("a refresh that changes the status: %v, %v", r4, err)
	}
	if err := catalog.ValidateChecksStatus(r4); err != nil {
		t.Fatalf("the report does not validate: %v", err)
	}
	if !r1.GetReportedAt().AsTime().Equal(t0) || r1.GetChecks()[0].GetOutput() != "ok" {
		t.Fatal("a refresh changed the report it started from")
	}

	for _, tc := range []struct {
		name        string
		si          *pbcatalog.ServiceInstance
		check, st   string
		note        string
		want        error
		wantMessage string
	}{
		{"an instance of a task", ofTask, "api-1", catalog.CheckPassing, "", catalog.ErrTaskChecks, "task api-1 on instance i-1"},
		{"a check not defined", outside, "nope", catalog.CheckPassing, "", catalog.ErrNoSuchCheck, `check "nope"`},
		{"a status that is none", outside, "alive", "ok", "", catalog.ErrBadCheckStatus, `status "ok"`},
		{"a note too long", outside, "alive", catalog.CheckPassing, strings.Repeat("x", catalog.MaxCheckOutputLength+1), nil, "note: 4097 bytes"},
	} {
		got, err := catalog.RefreshTTLCheck(tc.si, r1, tc.check, tc.st, tc.note, t1)
		if got != nil || err == nil || tc.want != nil && !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.wantMessage) {
			t.Errorf("%s: %v, %v", tc.name, got, err)
		}
	}
}
