package cli

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// This file is how a domain reads a spec file of its own (a task
// definition, an environment): one document, a mapping of a known shape,
// refused as every spec file is, with the file, the line and the field.

// Shape is what the document of a spec file must be.
type Shape struct{ s *shape }

// MessageShape is the shape of a protobuf message's JSON form.
func MessageShape(md protoreflect.MessageDescriptor) Shape { return Shape{messageShape(md)} }

// StructShape is the shape of a Go struct's JSON form, as encoding/json
// reads it: a field per json tag, in the struct's order. what names the
// document in errors ("an environment spec"); a nested struct is named by
// its field. Strings named like durations (see isDurationField) must be
// durations; whole numbers are refused outside their type's range, and
// only written as numbers (encoding/json takes neither 75.0 nor "75").
// It panics on a field type it does not know: a mistake every test of the
// spec hits.
func StructShape(v any, what string) Shape {
	return Shape{structShape(reflect.TypeOf(v), what)}
}

func structShape(t reflect.Type, what string) *shape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	s := object(what)
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		s.addField(field(name, valueShape(sf.Type, name)))
	}
	return s
}

func valueShape(t reflect.Type, name string) *shape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		if isDurationField(name) {
			return aDuration
		}
		return aString
	case reflect.Bool:
		return aBool
	case reflect.Int32:
		return wholeNumber(32, true)
	case reflect.Int64:
		return wholeNumber(64, true)
	case reflect.Uint64:
		return wholeNumber(64, false)
	case reflect.Float64:
		return &shape{kind: floatShape}
	case reflect.Slice:
		return listOf(valueShape(t.Elem(), name))
	case reflect.Struct:
		return structShape(t, name)
	}
	panic(fmt.Sprintf("cli.StructShape: field %s: no shape for %s", name, t))
}

// FieldNames lists the shape's fields, as a document would spell them.
func (s Shape) FieldNames() string { return s.s.fieldNames() }

// SpecDocument is the one document of a spec file, read and checked
// against its shape.
type SpecDocument struct {
	File string
	root *node
}

// SpecKind says how errors name a kind of spec file.
type SpecKind struct {
	What string // the document: "a task definition"
	One  string // one of them: "task definition" (one task definition per file)
	// Mapping is what a document holds, for one that is not a mapping
	// ("family and containers"); the shape's field names by default.
	Mapping string
}

// ReadSpecDocument reads a spec file of one document, a mapping of shape
// s, and checks it against s. file is how errors call the file.
func ReadSpecDocument(data []byte, file string, s Shape, kind SpecKind) (*SpecDocument, error) {
	roots, err := parseSpec(data)
	if err != nil {
		return nil, inFile(err, file)
	}
	switch {
	case len(roots) == 0:
		return nil, &SpecError{File: file, Reason: "empty: " + kind.What + " has " + s.FieldNames()}
	case len(roots) > 1:
		return nil, &SpecError{File: file, Line: roots[1].line, Reason: "one " + kind.One + " per file: this is a second document"}
	}
	root := roots[0]
	if root.kind != mapNode {
		mapping := kind.Mapping
		if mapping == "" {
			mapping = s.FieldNames()
		}
		return nil, &SpecError{File: file, Line: root.line, Reason: fmt.Sprintf("%s is a mapping with %s, not %s", kind.What, mapping, root.describe())}
	}
	if err := check(s.s, root, ""); err != nil {
		return nil, inFile(err, file)
	}
	return &SpecDocument{File: file, root: root}, nil
}

// JSON is the document as JSON.
func (d *SpecDocument) JSON() []byte { return d.root.toJSON() }

// Decode reads the document into v with encoding/json; the shape admits
// only what decodes.
func (d *SpecDocument) Decode(v any) error {
	if err := json.Unmarshal(d.JSON(), v); err != nil {
		return &SpecError{File: d.File, Line: d.root.line, Reason: err.Error()}
	}
	return nil
}

// Line is the line of a top-level field, or of the document when it has
// none.
func (d *SpecDocument) Line(key string) int { return lineOf(d.root, key) }

// Has reports whether the document has a top-level field, and its line.
func (d *SpecDocument) Has(key string) (int, bool) {
	e, ok := d.root.field(key)
	return e.line, ok
}

// Refuse turns a check's error about the document into a SpecError that
// points at the line and names the field as the file spells it: a
// *resource.FieldError names its field (renamed by rename, when it is not
// nil, from the checked value's path to the document's); any other error
// points at the document. nil stays nil.
func (d *SpecDocument) Refuse(err error, rename func(string) string) error {
	if err == nil {
		return nil
	}
	return inFile(locate(err, d.root, rename), d.File)
}
