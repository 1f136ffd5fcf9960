package cli

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"trellis.dev/trellis/internal/resource"
)

// sampleSpec is a spec's body as a domain's client sends it.
type sampleSpec struct {
	Name   string        `json:"name,omitempty"`
	Group  *sampleGroup  `json:"group,omitempty"`
	Limits *sampleLimits `json:"limits,omitempty"`
	Skip   string        `json:"-"`
}

type sampleGroup struct {
	Cluster string   `json:"cluster,omitempty"`
	Filters []string `json:"filters,omitzero"`
}

type sampleLimits struct {
	Percent *int32 `json:"percent,omitempty"`
	Timeout string `json:"timeout,omitempty"`
	Retry   *bool  `json:"retry,omitempty"`
}

// A struct's shape is its JSON form: the same fields, spelt as their json
// tags, in order, nested structs as mappings named by their field.
func TestStructShapeIsTheStruct(t *testing.T) {
	var walk func(s *shape, typ reflect.Type, path string)
	walk = func(s *shape, typ reflect.Type, path string) {
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		var tags []string
		for i := 0; i < typ.NumField(); i++ {
			if tag := strings.Split(typ.Field(i).Tag.Get("json"), ",")[0]; tag != "-" {
				tags = append(tags, tag)
			}
		}
		if got := s.fieldNames(); got != strings.Join(tags, ", ") {
			t.Errorf("%s: shape has %s, the struct %s", path, got, strings.Join(tags, ", "))
		}
		for i, f := range s.fields {
			if f.shape.kind == objectShape {
				if f.shape.what != f.name {
					t.Errorf("%s.%s: named %q", path, f.name, f.shape.what)
				}
				walk(f.shape, typ.Field(i).Type, path+"."+f.name)
			}
		}
	}
	s := StructShape(sampleSpec{}, "a sample")
	if s.s.what != "a sample" {
		t.Errorf("named %q", s.s.what)
	}
	walk(s.s, reflect.TypeOf(sampleSpec{}), "spec")
}

func TestReadSpecDocument(t *testing.T) {
	kind := SpecKind{What: "a sample", One: "sample"}
	shape := StructShape(sampleSpec{}, "a sample")
	doc, err := ReadSpecDocument([]byte("# a comment\nname: a\ngroup: {filters: [x]}\nlimits:\n  percent: 5\n  timeout: 10s\n"), "f.yaml", shape, kind)
	if err != nil {
		t.Fatal(err)
	}
	var spec sampleSpec
	if err := doc.Decode(&spec); err != nil || spec.Name != "a" || spec.Group.Filters[0] != "x" || *spec.Limits.Percent != 5 || spec.Limits.Timeout != "10s" {
		t.Fatalf("decoded %+v, %v", spec, err)
	}
	if line, ok := doc.Has("limits"); !ok || line != 4 || doc.Line("group") != 3 {
		t.Errorf("limits at %d (%v), group at %d", line, ok, doc.Line("group"))
	}
	// A field's error points at its line, by the path the file spells.
	err = doc.Refuse(resource.NewFieldError("limits.percent", "5 is too few"), nil)
	if err == nil || err.Error() != "f.yaml:5: limits.percent: 5 is too few" {
		t.Errorf("refused as %v", err)
	}
	if doc.Refuse(nil, nil) != nil {
		t.Error("nil refused")
	}

	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "f.yaml: empty: a sample has name, group, limits"},
		{"two documents", "name: a\n---\nname: b\n", "f.yaml:3: one sample per file: this is a second document"},
		{"not a mapping", "- a\n", "f.yaml:1: a sample is a mapping with name, group, limits, not a list"},
		{"a duration without unit", "limits: {timeout: 10}\n", `f.yaml:1: limits.timeout: a duration is needed: write it with a unit, like "10s"`},
		{"a quoted number", "limits: {percent: \"5\"}\n", "f.yaml:1: limits.percent: a whole number is needed: write it without quotes (5)"},
		{"unknown nested field", "group: {filter: [a]}\n", "f.yaml:1: group.filter: unknown field: did you mean filters?"},
	} {
		_, err := ReadSpecDocument([]byte(tc.in), "f.yaml", shape, kind)
		if err == nil || !errors.Is(err, ErrSpec) || err.Error() != tc.want {
			t.Errorf("%s: got %v\nwant %s", tc.name, err, tc.want)
		}
	}
	_, err = ReadSpecDocument([]byte("- a\n"), "f.yaml", shape, SpecKind{What: "a sample", One: "sample", Mapping: "a name"})
	if err == nil || err.Error() != "f.yaml:1: a sample is a mapping with a name, not a list" {
		t.Errorf("Mapping: %v", err)
	}
}
