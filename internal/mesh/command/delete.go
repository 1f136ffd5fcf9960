package command

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	pbmesh "trellis.dev/trellis/api/mesh/v1"
	"trellis.dev/trellis/internal/cli"
)

func newDeleteCmd(e *cli.Env) *cobra.Command {
	var sourceNS string
	return e.Command(cli.ClientCommand{
		Use:   "delete SRC DST",
		Short: "Remove the rule of the destination DST for the source SRC",
		Long: `Remove from the Intentions of DST (in -n, "default" by default) the rule for
SRC (in --source-namespace, DST's namespace unless given). Calls of SRC are
then decided by the next most specific rule that names it, or the mesh's
default action. Removing a destination's last rule deletes its Intentions.`,
		Example: `  trellis intention delete web api
  trellis intention delete '*' api --source-namespace '*'`,
		Args:          cobra.ExactArgs(2),
		Namespaced:    true,
		NamespaceHelp: `namespace of DST (default "default")`,
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&sourceNS, "source-namespace", "", `namespace of SRC, or "*" (default: DST's)`)
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			ns, dest := namespaceOr(call.Namespace), call.Args[1]
			srcNS := sourceNS
			if srcNS == "" {
				srcNS = ns
			}
			err := updateIntentions(ctx, call.Client, ns, dest, func(in *pbmesh.Intentions) error {
				i := sourceIndex(in, srcNS, call.Args[0])
				if i < 0 {
					return fmt.Errorf("%s/%s has no rule for %s/%s (trellis intention list %s -n %s lists its rules)", ns, dest, srcNS, call.Args[0], dest, ns)
				}
				in.Sources = append(in.Sources[:i], in.Sources[i+1:]...)
				return nil
			})
			if err != nil {
				return cli.Result{}, err
			}
			return cli.Say("Deleted: %s/%s → %s/%s", srcNS, call.Args[0], ns, dest), nil
		},
	})
}
