package cli

import (
	"errors"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// TaskDefinitionSpec is a task definition file, read and checked.
type TaskDefinitionSpec struct {
	Source     string // the file's name
	Family     string
	Definition *pborch.TaskDefinition // without a revision: registration assigns it
}

// ParseTaskDefinition reads a task definition file (`trellis taskdef
// register -f`): one YAML or JSON document, a TaskDefinition without its
// revision. name is how errors call the file. When types has the
// TaskDefinition type, the definition also meets the checks the server
// makes (its Mutate and Validate hooks) before anything is sent; types may
// be nil.
func ParseTaskDefinition(data []byte, name string, types *resource.Registry) (*TaskDefinitionSpec, error) {
	roots, err := parseSpec(data)
	if err != nil {
		return nil, inFile(err, name)
	}
	shape := messageShape((&pborch.TaskDefinition{}).ProtoReflect().Descriptor())
	switch {
	case len(roots) == 0:
		return nil, &SpecError{File: name, Reason: "empty: a task definition has " + shape.fieldNames()}
	case len(roots) > 1:
		return nil, &SpecError{File: name, Line: roots[1].line, Reason: "one task definition per file: this is a second document"}
	}
	root := roots[0]
	if root.kind != mapNode {
		return nil, &SpecError{File: name, Line: root.line, Reason: "a task definition is a mapping with family and containers, not " + root.describe()}
	}
	if err := check(shape, root, ""); err != nil {
		return nil, inFile(err, name)
	}
	for _, key := range []string{"revision"} {
		if e, ok := root.field(key); ok {
			return nil, &SpecError{File: name, Line: e.line, Path: key, Reason: "is assigned at registration; leave it out"}
		}
	}
	var td pborch.TaskDefinition
	if err := protojson.Unmarshal(root.toJSON(), &td); err != nil {
		return nil, &SpecError{File: name, Line: root.line, Reason: err.Error()} // the shape check should have said why
	}
	if td.GetFamily() == "" {
		return nil, &SpecError{File: name, Line: lineOf(root, "family"), Path: "family", Reason: "is required: the name the revisions share"}
	}
	if err := locate(orchestrator.ValidateFamily("family", td.GetFamily()), root, nil); err != nil {
		return nil, inFile(err, name)
	}
	if err := checkTaskDefinition(&td, types); err != nil {
		return nil, inFile(locate(err, root, func(f string) string { return strings.TrimPrefix(f, "data.") }), name)
	}
	return &TaskDefinitionSpec{Source: name, Family: td.GetFamily(), Definition: &td}, nil
}

// checkTaskDefinition runs the server's checks on the definition as its
// first revision (a revision's number changes nothing else).
func checkTaskDefinition(td *pborch.TaskDefinition, types *resource.Registry) error {
	if types == nil {
		return nil
	}
	if _, ok := types.Resolve(orchestrator.TaskDefinitionType); !ok {
		return nil
	}
	first := &pborch.TaskDefinition{Family: td.GetFamily(), Revision: 1, Containers: td.GetContainers(), RestartPolicy: td.GetRestartPolicy()}
	data, err := anypb.New(first)
	if err != nil {
		return err
	}
	err = types.Check(&pbresource.Resource{
		Id:   orchestrator.TaskDefinitionID("", td.GetFamily(), 1),
		Data: data,
	})
	var fe *resource.FieldError
	if errors.As(err, &fe) && (fe.Field == "id" || strings.HasPrefix(fe.Field, "id.")) {
		return nil // the name is made from the family, checked above
	}
	return err
}
