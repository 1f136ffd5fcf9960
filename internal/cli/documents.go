package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/resource"
)

// Document is one resource of a spec file, with where it came from.
type Document struct {
	wire.Document
	// Source is "file:line" of the document's first line.
	Source string
}

// documentShape is a document of `trellis resource apply`: a
// wire.Document. Its data is checked against its type's message.
var documentShape = object("a document",
	field("type", aString),
	field("name", aString),
	field("namespace", aString),
	field("metadata", mapOf(aString, aString)),
	field("version", aString),
	field("owner", object("owner",
		field("type", object("type", field("group", aString), field("group_version", aString), field("kind", aString))),
		field("tenancy", object("tenancy", field("namespace", aString))),
		field("name", aString),
		field("uid", aString),
	)),
	field("data", anything),
)

// ParseDocuments reads every document of a spec file (YAML or JSON; many
// documents separated by "---" lines, or a list of documents). name is how
// errors call the file.
//
// Every document is checked before any is returned: its fields, and, when
// types has its type, its data against the type's message and every
// check the server would make before it reads its store (the type's
// Mutate and Validate hooks). A document of a type types does not have is
// left for the server to judge. types may be nil.
func ParseDocuments(data []byte, name string, types *resource.Registry) ([]Document, error) {
	roots, err := parseSpec(data)
	if err != nil {
		return nil, inFile(err, name)
	}
	var docs []Document
	for _, root := range roots {
		members := []*node{root}
		if root.kind == listNode {
			members = root.items
		}
		for _, n := range members {
			d, err := decodeDocument(n, types)
			if err != nil {
				return nil, inFile(err, name)
			}
			d.Source = fmt.Sprintf("%s:%d", name, n.line)
			docs = append(docs, d)
		}
	}
	if len(docs) == 0 {
		return nil, &SpecError{File: name, Reason: "no documents in it"}
	}
	return docs, nil
}

func decodeDocument(n *node, types *resource.Registry) (Document, error) {
	if n.kind != mapNode {
		return Document{}, refusal(n.line, "", "a document must be a mapping with the fields %s, not %s", documentShape.fieldNames(), n.describe())
	}
	if err := check(documentShape, n, ""); err != nil {
		return Document{}, err
	}
	var d wire.Document
	if err := json.Unmarshal(n.toJSON(), &d); err != nil {
		return Document{}, refusal(n.line, "", "%v", err) // the shape admits only what decodes
	}
	typ, err := wire.ParseType(d.Type)
	switch {
	case d.Type == "":
		return Document{}, refusal(n.line, "type", "missing (group/version/kind, for example core/v1/Namespace)")
	case err != nil:
		return Document{}, refusal(lineOf(n, "type"), "type", "%q is not group/version/kind (for example core/v1/Namespace)", d.Type)
	case d.Name == "":
		return Document{}, refusal(n.line, "name", "missing")
	}
	dataNode := &node{kind: nullNode, line: n.line}
	if e, ok := n.field("data"); ok {
		dataNode = e.value
		d.Data = dataNode.toJSON()
	}
	if dataNode.kind != nullNode && dataNode.kind != mapNode {
		return Document{}, refusal(dataNode.line, "data", "a mapping of the type's fields is needed, not %s", dataNode.describe())
	}
	if types == nil {
		return Document{Document: d}, nil
	}
	reg, known := types.Resolve(&pbresource.Type{Group: typ.Group, GroupVersion: typ.GroupVersion, Kind: typ.Kind})
	if !known {
		return Document{Document: d}, nil
	}
	if err := checkResource(reg, n, dataNode, d, types); err != nil {
		return Document{}, err
	}
	return Document{Document: d}, nil
}

// checkResource checks a document of a known type: its data against the
// type's message, then what the server checks before it writes.
func checkResource(reg resource.Registration, n, dataNode *node, d wire.Document, types *resource.Registry) error {
	md := reg.Proto.ProtoReflect().Descriptor()
	if err := check(messageShape(md), dataNode, "data"); err != nil {
		return err
	}
	msg := reg.Proto.ProtoReflect().New().Interface()
	if dataNode.kind != nullNode {
		if err := protojson.Unmarshal(dataNode.toJSON(), msg); err != nil {
			return refusal(dataNode.line, "data", "%v", err) // the shape check should have said why
		}
	}
	a, err := anypb.New(msg)
	if err != nil {
		return refusal(dataNode.line, "data", "%v", err)
	}
	res := &pbresource.Resource{
		Id: &pbresource.ID{
			Type:    reg.Type,
			Tenancy: &pbresource.Tenancy{Namespace: d.Namespace},
			Name:    d.Name,
		},
		Version:  d.Version,
		Metadata: d.Metadata,
		Data:     a,
	}
	if o := d.Owner; o != nil {
		res.Owner = &pbresource.ID{
			Uid:     o.UID,
			Name:    o.Name,
			Type:    &pbresource.Type{Group: o.Type.Group, GroupVersion: o.Type.GroupVersion, Kind: o.Type.Kind},
			Tenancy: &pbresource.Tenancy{Namespace: o.Tenancy.Namespace},
		}
	}
	return locate(types.Check(res), n, documentField)
}

// documentField names a field of a resource (as the resource service's
// errors do) as a document spells it.
func documentField(field string) string {
	for _, m := range [][2]string{{"id.tenancy.namespace", "namespace"}, {"id.name", "name"}, {"id.type", "type"}, {"id.uid", ""}} {
		if field == m[0] || strings.HasPrefix(field, m[0]+".") {
			return m[1] + strings.TrimPrefix(field, m[0])
		}
	}
	return strings.TrimPrefix(field, "id.")
}

// locate turns the error of a check that names a field by its path (a
// resource.FieldError) into a refusal at that field's line, the path
// spelled as the file spells it. rename maps the check's path to the
// file's (nil: the same). Other errors refuse the document as a whole.
func locate(err error, root *node, rename func(string) string) error {
	if err == nil {
		return nil
	}
	var fe *resource.FieldError
	if !errors.As(err, &fe) {
		msg := err.Error()
		if st, ok := status.FromError(err); ok {
			msg = st.Message()
		}
		return refusal(root.line, "", "%s", msg)
	}
	field := fe.Field
	if rename != nil {
		field = rename(field)
	}
	if field == "" {
		return refusal(root.line, "", "%s", fe.Reason)
	}
	path, line := lookup(root, field)
	return refusal(line, path, "%s", fe.Reason)
}

// lineOf is the line of a top-level key of a mapping.
func lineOf(n *node, key string) int {
	if e, ok := n.field(key); ok {
		return e.line
	}
	return n.line
}

// SpecRulesHelp says, in the --help of a command that reads a spec file,
// how every spec file is read and refused.
const SpecRulesHelp = `YAML is read by YAML 1.2 rules: only true and false are booleans, so on, off,
yes, no, y and n stay the strings they are written as; quote a number meant as
a string. A mistake is refused before anything is sent, naming the file, the
line and the field as the file spells it, with how to fix it:

  web.yaml:6: containers[0].env.PORT: a string is needed: quote it ("8080")
  web.yaml:5: containers[0].command: a list is needed: write ["/bin/sleep", "100"]`
