package catalog

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
)

// ChecksPath is the catalog's operation that refreshes a TTL check of an
// instance registered from outside Trellis:
// PUT ChecksPath/{instance}/checks/{check}?namespace=, body CheckRefresh.
// It needs namespace:write, and writes the servers' status key
// (ServerChecksStatusKey) as the health controller, which alone
// owns it: a generic WriteStatus of that key is refused.
const ChecksPath = "/v1/catalog/instances"

// CheckRefresh is the body of a refresh: the check's new status
// (passing, warning or critical) and a note, its output.
type CheckRefresh struct {
	Status string `json:"status"`
	Note   string `json:"note,omitempty"`
}

// Refusals of RefreshTTLCheck. Each is wrapped with what names the
// instance or check.
var (
	// ErrTaskChecks refuses a refresh of an instance of a task: its checks
	// are its agent's (health-sync), which reports its task's health.
	ErrTaskChecks = errors.New("its checks are its agent's")
	// ErrNoSuchCheck refuses a check the instance does not define.
	ErrNoSuchCheck = errors.New("no such check")
	// ErrNotTTL refuses a check without a ttl (none of an instance from
	// outside Trellis is, but a refresh must not make one up).
	ErrNotTTL = errors.New("not a TTL check")
	// ErrBadCheckStatus refuses a status that is not one of CheckStatuses.
	ErrBadCheckStatus = errors.New("not a check status")
)

// RefreshTTLCheck is the servers' decision on a refresh of the TTL check
// named check of an instance registered from outside Trellis (trellis
// service check pass|warn|fail): the report to write under
// ServerChecksStatusKey, from the servers' last one (servers; nil when
// none), with check at st, note as its output, checked at now (changed at
// now when its status changes) and every other reported check kept. It
// refuses an instance of a task (ErrTaskChecks), a check the instance does
// not define or without a ttl, a status that is not passing, warning or
// critical, and a note over MaxCheckOutputLength. It is pure.
func RefreshTTLCheck(si *pbcatalog.ServiceInstance, servers *pbcatalog.ChecksStatus, check, st, note string, now time.Time) (*pbcatalog.ChecksStatus, error) {
	if si.GetInstance() != "" || si.GetTask() != "" {
		return nil, fmt.Errorf("it is an instance of task %s on instance %s: %w (health-sync reports its task's health), and none is a TTL check", si.GetTask(), si.GetInstance(), ErrTaskChecks)
	}
	i := slices.IndexFunc(si.GetChecks(), func(d *pbcatalog.CheckDefinition) bool { return d.GetName() == check })
	if i < 0 {
		names := make([]string, 0, len(si.GetChecks()))
		for _, d := range si.GetChecks() {
			names = append(names, d.GetName())
		}
		return nil, fmt.Errorf("check %q: %w (the instance has %q)", check, ErrNoSuchCheck, names)
	}
	if si.GetChecks()[i].GetTtl() == nil {
		return nil, fmt.Errorf("check %q: %w", check, ErrNotTTL)
	}
	if !slices.Contains(CheckStatuses, st) {
		return nil, fmt.Errorf("status %q: %w: give one of %q", st, ErrBadCheckStatus, CheckStatuses)
	}
	if len(note) > MaxCheckOutputLength {
		return nil, fmt.Errorf("note: %d bytes, over the limit of %d", len(note), MaxCheckOutputLength)
	}
	at := timestamppb.New(now)
	next := &pbcatalog.CheckStatus{Name: check, Status: st, Output: note, ChangedAt: at, CheckedAt: at}
	out := &pbcatalog.ChecksStatus{ReportedAt: at}
	found := false
	for _, c := range servers.GetChecks() {
		if c.GetName() != check {
			out.Checks = append(out.Checks, c)
			continue
		}
		found = true
		if c.GetStatus() == st && c.GetChangedAt() != nil {
			next.ChangedAt = c.GetChangedAt()
		}
		out.Checks = append(out.Checks, next)
	}
	if !found {
		out.Checks = append(out.Checks, next)
	}
	out.Health = Aggregate(out.Checks)
	return out, nil
}
