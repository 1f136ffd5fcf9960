package command

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pbmesh "trellis.dev/trellis/api/mesh/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/mesh"
	"trellis.dev/trellis/internal/resource"
)

// permissionsShape is the file of `trellis intention create -f`: a
// source's permissions and description, as IntentionSource spells them.
var permissionsShape = cli.MessageShape((&pbmesh.IntentionSource{}).ProtoReflect().Descriptor())

func newCreateCmd(e *cli.Env) *cobra.Command {
	var action, sourceNS, file, description string
	var replace bool
	var src *pbmesh.IntentionSource
	return e.Command(cli.ClientCommand{
		Use:   "create SRC DST (--action allow|deny | -f permissions.yaml)",
		Short: "Add a rule for the calls of SRC to DST: allow, deny, or L7 permissions",
		Long: `Add to the Intentions of the destination service DST (in -n, "default" by
default) a rule for the source SRC (a service name, or "*" for every service
of --source-namespace, which is DST's namespace unless given; "*" for every
namespace, with SRC "*"). The rule is one of:

  --action allow|deny    every connection and request of SRC
  -f permissions.yaml    L7 permissions, evaluated per HTTP request in order:
                         the first that matches decides; a request none
                         matches gets the mesh's default action

A permissions file (YAML or JSON):

  description: read-only access, no admin
  permissions:
    - action: deny
      http: {path_prefix: /admin}
    - action: allow
      http:
        path_regex: /v1/items/[0-9]+      # RE2, matching the whole path
        methods: [GET, HEAD]
        headers:
          - {name: x-team, exact: payments}  # or present, prefix, suffix, regex; invert: true

Only a destination that speaks HTTP (protocol http or grpc) can be given L7
permissions. A rule for SRC that exists already is refused unless --replace.`,
		Example: `  trellis intention create web api --action allow
  trellis intention create '*' api --action deny --description "nothing else"
  trellis intention create '*' api --source-namespace '*' --action deny
  trellis intention create billing api --source-namespace payments --action allow
  trellis intention create admin api -f permissions.yaml
  trellis intention create web api --action deny --replace`,
		Args:          cobra.ExactArgs(2),
		Namespaced:    true,
		NamespaceHelp: `namespace of DST (default "default")`,
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&action, "action", "", "allow or deny every connection and request of SRC")
			fs.StringVar(&sourceNS, "source-namespace", "", `namespace of SRC, or "*" for every namespace (default: DST's)`)
			fs.StringVarP(&file, "file", "f", "", "a file of L7 permissions (- for standard input)")
			fs.StringVar(&description, "description", "", "why the rule is there")
			fs.BoolVar(&replace, "replace", false, "replace SRC's rule if DST has one")
		},
		Check: func(call *cli.Call) error {
			dest := call.Args[1]
			if err := checkDestination(dest); err != nil {
				return err
			}
			if (action == "") == (file == "") {
				return cli.Usage(errors.New("give --action allow|deny, or -f with L7 permissions (one of them)"))
			}
			src = &pbmesh.IntentionSource{Name: call.Args[0], Namespace: sourceNS, Action: action, Description: description}
			if src.Namespace == "" {
				src.Namespace = namespaceOr(call.Namespace)
			}
			fileName := file
			if file != "" {
				fromFile, name, err := readPermissions(call.Env, file)
				if err != nil {
					return err
				}
				fileName = name
				src.Permissions = fromFile.GetPermissions()
				if description == "" {
					src.Description = fromFile.GetDescription()
				}
			}
			// The same checks as the servers', said of the arguments.
			_, err := mesh.Compile(mesh.Service{Namespace: src.Namespace, Name: dest}, &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{src}})
			return sourceError(err, fileName)
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			ns, dest := namespaceOr(call.Namespace), call.Args[1]
			verb := "Created"
			err := updateIntentions(ctx, call.Client, ns, dest, func(in *pbmesh.Intentions) error {
				i := sourceIndex(in, src.GetNamespace(), src.GetName())
				switch {
				case i < 0:
					in.Sources = append(in.Sources, proto.Clone(src).(*pbmesh.IntentionSource))
				case !replace:
					return fmt.Errorf("%s/%s already has a rule for %s/%s (%s): give --replace to replace it, or trellis intention delete first", ns, dest, src.GetNamespace(), src.GetName(), describeRule(in.GetSources()[i]))
				default:
					in.Sources[i] = proto.Clone(src).(*pbmesh.IntentionSource)
					verb = "Replaced"
				}
				return nil
			})
			if err != nil {
				return cli.Result{}, err
			}
			return cli.Say("%s: %s/%s → %s/%s (%s)", verb, src.GetNamespace(), src.GetName(), ns, dest, describeRule(src)), nil
		},
	})
}

// checkDestination refuses a destination that is not one service.
func checkDestination(dest string) error {
	if dest == mesh.Wildcard {
		return cli.Usage(errors.New(`DST "*": a rule for every destination is the mesh's default action (default_intention of mesh/v1/MeshConfig "default"); intentions name one destination service`))
	}
	if !resource.IsDNSLabel(dest) {
		return cli.Usage(fmt.Errorf("DST %q is not a service name: a lowercase DNS label (a-z, 0-9, '-', at most 63 characters)", dest))
	}
	return nil
}

// readPermissions reads the file of -f: permissions and a description.
// It returns the name errors give the file ("stdin" for -).
func readPermissions(e *cli.Env, file string) (*pbmesh.IntentionSource, string, error) {
	data, name, err := e.ReadInput(file)
	if err != nil {
		return nil, file, err
	}
	doc, err := cli.ReadSpecDocument(data, name, permissionsShape, cli.SpecKind{What: "a permissions file", One: "set of permissions", Mapping: "permissions and a description"})
	if err != nil {
		return nil, name, err
	}
	for _, f := range []string{"name", "namespace", "action"} {
		if line, ok := doc.Has(f); ok {
			return nil, name, fmt.Errorf("%s:%d: %s: is not set in a permissions file: SRC, --source-namespace and --action say it", name, line, f)
		}
	}
	var src pbmesh.IntentionSource
	if err := protojson.Unmarshal(doc.JSON(), &src); err != nil {
		return nil, name, fmt.Errorf("%s: %v", name, err)
	}
	if len(src.GetPermissions()) == 0 {
		return nil, name, fmt.Errorf("%s: permissions: is empty: give at least one (or --action instead of -f)", name)
	}
	return &src, name, nil
}

// sourceError says a refusal of Compile of the one source being created
// in the words of the command: the flags, or the file's fields.
func sourceError(err error, file string) error {
	var fe *resource.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	field := strings.TrimPrefix(strings.TrimPrefix(fe.Field, "sources[0]"), ".")
	switch {
	case field == "name":
		return cli.Usage(fmt.Errorf("SRC: %s", fe.Reason))
	case field == "namespace":
		return cli.Usage(fmt.Errorf("--source-namespace: %s", fe.Reason))
	case field == "action":
		return cli.Usage(fmt.Errorf("--action: %s", fe.Reason))
	case strings.HasPrefix(field, "permissions"):
		return fmt.Errorf("%s: %s: %s", file, field, fe.Reason)
	}
	return err
}

// describeRule says what a source's rule does, in a few words.
func describeRule(s *pbmesh.IntentionSource) string {
	if n := len(s.GetPermissions()); n > 0 {
		return fmt.Sprintf("L7, %d permission%s", n, plural(n))
	}
	return s.GetAction()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
