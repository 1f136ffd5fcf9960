package scheduler

import (
	"strings"
	"testing"

	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
)

func TestParseFilter(t *testing.T) {
	attrs := map[string]string{"role": "logger", "zone": "a", "gpu": ""}
	for _, tc := range []struct {
		in    string
		canon string
		match bool
	}{
		{"role=logger", "role=logger", true},
		{" role = logger ", "role=logger", true},
		{"role!=logger", "role!=logger", false},
		{"role!=web", "role!=web", true},
		{"missing!=x", "missing!=x", true},
		{"gpu", "gpu", true},
		{"missing", "missing", false},
		{"!missing", "!missing", true},
		{"!gpu", "!gpu", false},
		{"zone in (a,b)", "zone in (a,b)", true},
		{"zone in (b, c)", "zone in (b,c)", false},
		{"zone IN (b,a,a)", "zone in (a,b)", true},
		{"zone notin (b,c)", "zone notin (b,c)", true},
		{"missing notin (a)", "missing notin (a)", true},
		{"missing in (a)", "missing in (a)", false},
		{"node.kernel/major=6", "node.kernel/major=6", false},
	} {
		f, err := ParseFilter(tc.in)
		if err != nil {
			t.Fatalf("ParseFilter(%q): %v", tc.in, err)
		}
		if f.String() != tc.canon {
			t.Errorf("ParseFilter(%q) = %q, want %q", tc.in, f.String(), tc.canon)
		}
		if got := f.Matches(attrs); got != tc.match {
			t.Errorf("%q.Matches = %v, want %v", tc.in, got, tc.match)
		}
	}
}

func TestParseFilterRefuses(t *testing.T) {
	for in, want := range map[string]string{
		"":              "is empty",
		"   ":           "is empty",
		"=x":            "has no attribute key",
		"role=":         "has no value after the operator",
		"role!=":        "has no value",
		"zone in a,b":   "must be in parentheses",
		"zone in (a":    "must be in parentheses",
		"zone in (a,)":  "has an empty value",
		"zone in ()":    "has an empty value",
		"ro le=x":       "may hold only letters",
		"role=a=b":      "may not contain",
		"!":             "has no attribute key",
		"zone in (a b)": "may not contain spaces",
	} {
		_, err := ParseFilter(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseFilter(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}

func TestParseGroupNamesTheFilter(t *testing.T) {
	_, err := ParseGroup("instance_group", &pbscheduler.InstanceGroup{Attributes: []string{"role=a", "zone in (a"}})
	if err == nil || !strings.HasPrefix(err.Error(), "instance_group.attributes[1]: ") {
		t.Fatalf("got %v, want an error naming instance_group.attributes[1]", err)
	}
	g, err := ParseGroup("g", &pbscheduler.InstanceGroup{})
	if err != nil || g.Cluster != DefaultCluster {
		t.Fatalf("an empty group: %+v, %v; want the default cluster", g, err)
	}
}

func TestOverlap(t *testing.T) {
	parse := func(cluster string, fs ...string) Group {
		g, err := ParseGroup("g", &pbscheduler.InstanceGroup{Cluster: cluster, Attributes: fs})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	for _, tc := range []struct {
		a, b Group
		want bool
	}{
		{parse("c"), parse("c"), true},
		{parse("c"), parse("d"), false},
		{parse("c", "role=a"), parse("c", "role=b"), false},
		{parse("c", "role=a"), parse("c", "role!=a"), false},
		{parse("c", "role=a"), parse("c", "zone=x"), true},
		{parse("c", "role"), parse("c", "!role"), false},
		{parse("c", "role in (a,b)"), parse("c", "role in (b,c)"), true},
		{parse("c", "role in (a,b)"), parse("c", "role notin (a,b)"), false},
		{parse("c", "role in (a,b)"), parse("c", "role=c"), false},
		{parse("c", "role!=a"), parse("c", "role!=b"), true},
	} {
		if got := Overlap(tc.a, tc.b); got != tc.want {
			t.Errorf("Overlap(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if got := Overlap(tc.b, tc.a); got != tc.want {
			t.Errorf("Overlap(%v, %v) = %v, want %v (reversed)", tc.b, tc.a, got, tc.want)
		}
	}
}
