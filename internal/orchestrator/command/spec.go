package command

import (
	"errors"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// TaskDefinitionSpec is a task definition file, read and checked.
type TaskDefinitionSpec struct {
	Source     string // the file's name
	Family     string
	Definition *pborch.TaskDefinition // without a revision: registration assigns it
}

// taskDefinitionShape is a task definition file: a TaskDefinition's JSON
// form (its revision is refused apart, with a reason).
var taskDefinitionShape = cli.MessageShape((&pborch.TaskDefinition{}).ProtoReflect().Descriptor())

// ParseTaskDefinition reads a task definition file (`trellis taskdef
// register -f`): one YAML or JSON document, a TaskDefinition without its
// revision. name is how errors call the file. When types has the
// TaskDefinition type, the definition also meets the checks the server
// makes (its Mutate and Validate hooks) before anything is sent; types may
// be nil.
func ParseTaskDefinition(data []byte, name string, types *resource.Registry) (*TaskDefinitionSpec, error) {
	doc, err := cli.ReadSpecDocument(data, name, taskDefinitionShape, cli.SpecKind{What: "a task definition", One: "task definition", Mapping: "family and containers"})
	if err != nil {
		return nil, err
	}
	for _, key := range []string{"revision"} {
		if line, ok := doc.Has(key); ok {
			return nil, &cli.SpecError{File: name, Line: line, Path: key, Reason: "is assigned at registration; leave it out"}
		}
	}
	var td pborch.TaskDefinition
	if err := protojson.Unmarshal(doc.JSON(), &td); err != nil {
		return nil, doc.Refuse(err, nil) // the shape check should have said why
	}
	if td.GetFamily() == "" {
		return nil, &cli.SpecError{File: name, Line: doc.Line("family"), Path: "family", Reason: "is required: the name the revisions share"}
	}
	if err := doc.Refuse(orchestrator.ValidateFamily("family", td.GetFamily()), nil); err != nil {
		return nil, err
	}
	if err := doc.Refuse(checkTaskDefinition(&td, types), func(f string) string { return strings.TrimPrefix(f, "data.") }); err != nil {
		return nil, err
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
	first := proto.Clone(td).(*pborch.TaskDefinition)
	first.Revision = 1
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
