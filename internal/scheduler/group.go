package scheduler

import (
	"fmt"
	"slices"
	"strings"

	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/resource"
)

// filterOp is how an attribute filter compares.
type filterOp int

const (
	opEquals filterOp = iota
	opNotEquals
	opExists
	opNotExists
	opIn
	opNotIn
)

// Filter is one parsed attribute filter of an instance group.
type Filter struct {
	Key    string
	op     filterOp
	Values []string
}

// Matches reports whether attrs satisfy the filter.
func (f Filter) Matches(attrs map[string]string) bool {
	v, ok := attrs[f.Key]
	switch f.op {
	case opEquals:
		return ok && v == f.Values[0]
	case opNotEquals:
		return !ok || v != f.Values[0]
	case opExists:
		return ok
	case opNotExists:
		return !ok
	case opIn:
		return ok && slices.Contains(f.Values, v)
	case opNotIn:
		return !ok || !slices.Contains(f.Values, v)
	}
	return false
}

// String is the filter in its canonical form.
func (f Filter) String() string {
	switch f.op {
	case opEquals:
		return f.Key + "=" + f.Values[0]
	case opNotEquals:
		return f.Key + "!=" + f.Values[0]
	case opExists:
		return f.Key
	case opNotExists:
		return "!" + f.Key
	case opIn:
		return f.Key + " in (" + strings.Join(f.Values, ",") + ")"
	case opNotIn:
		return f.Key + " notin (" + strings.Join(f.Values, ",") + ")"
	}
	return ""
}

// Group is a parsed instance group: a cluster and filters that must all
// hold.
type Group struct {
	Cluster string
	Filters []Filter
}

// Matches reports whether an instance of cluster with attrs is in the
// group.
func (g Group) Matches(cluster string, attrs map[string]string) bool {
	if cluster != g.Cluster {
		return false
	}
	for _, f := range g.Filters {
		if !f.Matches(attrs) {
			return false
		}
	}
	return true
}

// String says the group the way the CLI does: "cluster default,
// role=logger, zone in (a,b)".
func (g Group) String() string {
	parts := []string{"cluster " + g.Cluster}
	for _, f := range g.Filters {
		parts = append(parts, f.String())
	}
	return strings.Join(parts, ", ")
}

// ParseGroup parses an instance group, naming field in its errors. An
// empty cluster means "default".
func ParseGroup(field string, g *pbscheduler.InstanceGroup) (Group, error) {
	out := Group{Cluster: g.GetCluster()}
	if out.Cluster == "" {
		out.Cluster = DefaultCluster
	}
	for i, s := range g.GetAttributes() {
		f, err := ParseFilter(s)
		if err != nil {
			return Group{}, resource.NewFieldError(fmt.Sprintf("%s.attributes[%d]", field, i), "%v", err)
		}
		out.Filters = append(out.Filters, f)
	}
	return out, nil
}

// DefaultCluster is the cluster of an instance group that names none, and
// of agents started without -cluster.
const DefaultCluster = "default"

// ParseFilter parses one attribute filter: "key=value", "key!=value",
// "key", "!key", "key in (a,b)" or "key notin (a,b)".
func ParseFilter(s string) (Filter, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return Filter{}, fmt.Errorf("is empty: write key=value, key!=value, key, !key, key in (a,b) or key notin (a,b)")
	}
	if k, rest, ok := cutWord(t, " notin "); ok {
		return setFilter(s, k, rest, opNotIn)
	}
	if k, rest, ok := cutWord(t, " in "); ok {
		return setFilter(s, k, rest, opIn)
	}
	if k, v, ok := strings.Cut(t, "!="); ok {
		return valueFilter(s, k, v, opNotEquals)
	}
	if k, v, ok := strings.Cut(t, "="); ok {
		return valueFilter(s, k, v, opEquals)
	}
	if k, ok := strings.CutPrefix(t, "!"); ok {
		k = strings.TrimSpace(k)
		if err := checkKey(s, k); err != nil {
			return Filter{}, err
		}
		return Filter{Key: k, op: opNotExists}, nil
	}
	if err := checkKey(s, t); err != nil {
		return Filter{}, err
	}
	return Filter{Key: t, op: opExists}, nil
}

// cutWord splits s around the first sep, case-insensitively.
func cutWord(s, sep string) (before, after string, found bool) {
	i := strings.Index(strings.ToLower(s), sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

func valueFilter(s, k, v string, op filterOp) (Filter, error) {
	k, v = strings.TrimSpace(k), strings.TrimSpace(v)
	if err := checkKey(s, k); err != nil {
		return Filter{}, err
	}
	if v == "" {
		return Filter{}, fmt.Errorf("%q has no value after the operator (to test that %s is set, write just %q)", s, k, k)
	}
	if strings.ContainsAny(v, "=!(),") {
		return Filter{}, fmt.Errorf("%q: the value %q may not contain '=', '!', '(', ')' or ','", s, v)
	}
	return Filter{Key: k, op: op, Values: []string{v}}, nil
}

func setFilter(s, k, rest string, op filterOp) (Filter, error) {
	k, rest = strings.TrimSpace(k), strings.TrimSpace(rest)
	if err := checkKey(s, k); err != nil {
		return Filter{}, err
	}
	inner, ok := strings.CutPrefix(rest, "(")
	if ok {
		inner, ok = strings.CutSuffix(inner, ")")
	}
	if !ok {
		return Filter{}, fmt.Errorf("%q: the values must be in parentheses, like %s in (a,b)", s, k)
	}
	var values []string
	for v := range strings.SplitSeq(inner, ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			return Filter{}, fmt.Errorf("%q has an empty value in its list", s)
		}
		if strings.ContainsAny(v, "=!() ") {
			return Filter{}, fmt.Errorf("%q: the value %q may not contain spaces, '=', '!', '(' or ')'", s, v)
		}
		values = append(values, v)
	}
	slices.Sort(values)
	return Filter{Key: k, op: op, Values: slices.Compact(values)}, nil
}

// checkKey accepts attribute keys the way agents write them: letters,
// digits, '.', '-', '_' and '/'.
func checkKey(s, k string) error {
	if k == "" {
		return fmt.Errorf("%q has no attribute key", s)
	}
	for _, c := range k {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '-', c == '_', c == '/':
		default:
			return fmt.Errorf("%q: the key %q may hold only letters, digits, '.', '-', '_' and '/'", s, k)
		}
	}
	return nil
}

// Overlap reports whether two groups can select the same instance: same
// cluster, and no pair of filters on one key that no value satisfies
// together. It errs toward "can": only a contradiction it can prove keeps
// two groups apart.
func Overlap(a, b Group) bool {
	if a.Cluster != b.Cluster {
		return false
	}
	for _, f := range a.Filters {
		for _, g := range b.Filters {
			if f.Key == g.Key && disjoint(f, g) {
				return false
			}
		}
	}
	return true
}

// disjoint reports whether no attribute value (or absence) of one key
// satisfies both filters.
func disjoint(f, g Filter) bool {
	// The candidate values: every value either names, one value neither
	// names, and absence. If none satisfies both, they are disjoint.
	candidates := []map[string]string{{}}
	for _, v := range append(slices.Clone(f.Values), g.Values...) {
		candidates = append(candidates, map[string]string{f.Key: v})
	}
	candidates = append(candidates, map[string]string{f.Key: "\x00other"})
	for _, attrs := range candidates {
		if f.Matches(attrs) && g.Matches(attrs) {
			return false
		}
	}
	return true
}
