package command

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/agent/session"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/orchestrator"
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
		if !session.BuiltinAttribute(k) {
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

// writeTaskNetwork adds to task show's table what the agent reports of
// the task's network, when it reports it: the mode, and for a bridge
// task its namespace, address and published ports.
func writeTaskNetwork(tw io.Writer, n *pborch.TaskNetwork) {
	if n == nil {
		return
	}
	fmt.Fprintf(tw, "Network:\t%s\n", cli.Dash(n.GetMode()))
	if n.GetNamespacePath() != "" {
		fmt.Fprintf(tw, "Network namespace:\t%s\n", n.GetNamespacePath())
	}
	if n.GetAddress() != "" {
		fmt.Fprintf(tw, "Address:\t%s\n", n.GetAddress())
	}
	if len(n.GetPorts()) > 0 {
		var ports []string
		for _, p := range n.GetPorts() {
			proto := p.GetProtocol()
			if proto == "" {
				proto = orchestrator.ProtocolTCP
			}
			ports = append(ports, fmt.Sprintf("%s %d/%s -> %d", p.GetName(), p.GetHostPort(), proto, p.GetContainerPort()))
		}
		fmt.Fprintf(tw, "Published ports:\t%s\n", strings.Join(ports, ", "))
	}
}

// writeTaskDefinitionNetwork is taskdef show's network: the mode, and the
// ports a bridge task publishes.
func writeTaskDefinitionNetwork(w io.Writer, td *pborch.TaskDefinition) {
	mode := orchestrator.NetworkMode(td)
	switch mode {
	case orchestrator.NetworkBridge:
		fmt.Fprintln(w, "\nNetwork: bridge (one network namespace for the task, shared by its containers)")
	case orchestrator.NetworkHost:
		fmt.Fprintln(w, "\nNetwork: host (the instance's)")
	default:
		fmt.Fprintf(w, "\nNetwork: %s\n", mode)
	}
	if len(td.GetPorts()) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := cli.NewTable(w)
	fmt.Fprintln(tw, "PORT\tCONTAINER PORT\tHOST PORT\tPROTOCOL")
	for _, p := range td.GetPorts() {
		host := fmt.Sprint(p.GetHostPort())
		if p.GetHostPort() == 0 {
			host = "any (the agent picks)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", p.GetName(), p.GetContainerPort(), host, orchestrator.PortProtocol(p))
	}
	tw.Flush()
}

// writeTaskDefinitionMesh is taskdef show's mesh block: the service its
// tasks are instances of, the app's port and protocol, how outbound
// traffic reaches the proxy, the tags and meta, and the upstreams;
// nothing for a definition without one.
func writeTaskDefinitionMesh(w io.Writer, td *pborch.TaskDefinition) {
	m := td.GetMesh()
	if m == nil {
		return
	}
	fmt.Fprintf(w, "\nMesh: service %s, app port %d, protocol %s\n", orchestrator.MeshService(td), m.GetPort(), orchestrator.MeshProtocol(m))
	tw := cli.NewTable(w)
	if m.GetTransparent() {
		fmt.Fprintln(tw, "  Outbound:\ttransparent (all outbound TCP through the proxy)")
	} else {
		fmt.Fprintln(tw, "  Outbound:\tthe upstreams' local ports only")
	}
	fmt.Fprintf(tw, "  Tags:\t%s\n", cli.Dash(strings.Join(m.GetTags(), ",")))
	fmt.Fprintf(tw, "  Meta:\t%s\n", cli.Dash(joinSorted(m.GetMeta())))
	tw.Flush()
	if len(m.GetUpstreams()) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = cli.NewTable(w)
	fmt.Fprintln(tw, "UPSTREAM\tNAMESPACE\tLOCAL ADDRESS")
	for _, u := range m.GetUpstreams() {
		ns := u.GetNamespace()
		if ns == "" {
			ns = "(the task's)"
		}
		fmt.Fprintf(tw, "%s\t%s\t127.0.0.1:%d\n", u.GetService(), ns, u.GetLocalPort())
	}
	tw.Flush()
}
