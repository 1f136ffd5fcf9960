package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/oklog/ulid/v2"
	"sigs.k8s.io/yaml"

	"trellis.dev/trellis/internal/httpapi/wire"
)

// Output formats.
const (
	FormatTable = "table"
	FormatJSON  = "json"
	FormatYAML  = "yaml"
)

// WriteValue prints v (a wire value, encoded as the API encodes it) as
// indented JSON or as YAML.
func WriteValue(w io.Writer, format string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return WriteRaw(w, format, b)
}

// WriteRaw prints a JSON document as indented JSON or as YAML.
func WriteRaw(w io.Writer, format string, js []byte) error {
	switch format {
	case FormatYAML:
		y, err := yaml.JSONToYAML(js)
		if err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	default:
		var buf bytes.Buffer
		if err := json.Indent(&buf, js, "", "  "); err != nil {
			return err
		}
		buf.WriteByte('\n')
		_, err := w.Write(buf.Bytes())
		return err
	}
}

// WriteTable prints resources as a table: NAME, NAMESPACE (left out when
// no resource has one: cluster-scoped types), VERSION, GENERATION, AGE.
func WriteTable(w io.Writer, resources []*wire.Resource, now time.Time) error {
	namespaced := false
	for _, r := range resources {
		if r.ID.Tenancy.Namespace != "" {
			namespaced = true
		}
	}
	tw := NewTable(w)
	if namespaced {
		fmt.Fprintln(tw, "NAME\tNAMESPACE\tVERSION\tGENERATION\tAGE")
	} else {
		fmt.Fprintln(tw, "NAME\tVERSION\tGENERATION\tAGE")
	}
	for _, r := range resources {
		age := Age(r.ID.UID, now)
		if namespaced {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID.Name, r.ID.Tenancy.Namespace, r.Version, r.Generation, age)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID.Name, r.Version, r.Generation, age)
		}
	}
	return tw.Flush()
}

// eventRow is the layout of watch events: fixed widths, since a stream
// cannot be aligned after the fact.
const eventRow = "%-15s %-30s %-15s %-10s %-10s %s\n"

// WriteEventHeader prints the header of watch rows.
func WriteEventHeader(w io.Writer) error {
	_, err := fmt.Fprintf(w, eventRow, "EVENT", "NAME", "NAMESPACE", "VERSION", "GENERATION", "INDEX")
	return err
}

// WriteEventRow prints one watch event.
func WriteEventRow(w io.Writer, ev *wire.Event) error {
	if ev.Op == wire.OpEndOfSnapshot {
		_, err := fmt.Fprintf(w, "-- end of snapshot at index %d: changes follow --\n", ev.Index)
		return err
	}
	var name, ns, version, gen string
	if r := ev.Resource; r != nil {
		name, ns, version, gen = r.ID.Name, r.ID.Tenancy.Namespace, r.Version, r.Generation
	}
	_, err := fmt.Fprintf(w, eventRow, strings.ToUpper(ev.Op), name, Dash(ns), version, gen, strconv.FormatUint(ev.Index, 10))
	return err
}

// NewTable returns the tab writer every table of the CLI is printed with.
func NewTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 3, ' ', 0) }

// Dash is s, or "-" for an empty cell.
func Dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Age is how long ago the resource with that uid (a ULID, which carries its
// creation time) was created, the way kubectl shows it: 45s, 12m, 5h, 3d.
func Age(uid string, now time.Time) string {
	id, err := ulid.ParseStrict(uid)
	if err != nil {
		return "-"
	}
	return FormatAge(now.Sub(ulid.Time(id.Time())))
}

// FormatAge formats a duration coarsely.
func FormatAge(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
