package command

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/agent"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/httpapi/wire"
)

// How the orchestrator's objects are shown in tables.

// taskRow is a task with its decoded data and what its agent reports.
type taskRow struct {
	r      *wire.Resource
	task   *pborch.Task
	status *pborch.TaskStatus
}

func writeTaskTable(w io.Writer, rows []taskRow, indent string, now time.Time) error {
	tw := cli.NewTable(w)
	fmt.Fprintln(tw, indent+"TASK\tNAMESPACE\tTASKDEF\tINSTANCE\tDESIRED\tLAST\tHEALTH\tAGE")
	for _, row := range rows {
		t, st := row.task, row.status
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", indent, row.r.ID.Name, row.r.ID.Tenancy.Namespace, t.GetTaskDefinition(), t.GetInstance(),
			t.GetDesiredStatus(), st.GetLastStatus(), TaskHealth(st), cli.Age(row.r.ID.UID, now))
	}
	return tw.Flush()
}

// operatorAttributes are the attributes the agent does not set itself; the
// list shows only those, which say more.
func operatorAttributes(attrs map[string]string) map[string]string {
	out := make(map[string]string)
	for k, v := range attrs {
		if !agent.BuiltinAttribute(k) {
			out[k] = v
		}
	}
	return out
}

func availableDrivers(in *pborch.Instance) string {
	var names []string
	for _, d := range in.GetDrivers() {
		if d.GetAvailable() {
			names = append(names, d.GetName())
		}
	}
	return strings.Join(names, ",")
}

func joinSorted(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

func describeCheck(h *pborch.HealthCheck) string {
	switch {
	case h == nil:
		return ""
	case h.GetHttp() != "":
		return "http " + h.GetHttp()
	case h.GetTcp() != "":
		return "tcp " + h.GetTcp()
	default:
		return "command " + strings.Join(h.GetCommand(), " ")
	}
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
