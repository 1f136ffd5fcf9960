package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/cli"
)

// Set at link time by `make build` (-ldflags "-X main.version=..."): they
// win over what Go records, which lacks the commit when building from a
// git worktree or with GOFLAGS=-buildvcs=false.
var (
	version   string
	commit    string
	buildDate string
	modified  string
)

func stamp() cli.Stamp {
	return cli.Stamp{Version: version, Commit: commit, BuildDate: buildDate, Modified: modified}
}

// readBuildInfo is the build information Go recorded, or nil.
func readBuildInfo() *debug.BuildInfo {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	return info
}

func newVersionCmd(e *cli.Env, build cli.Build) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, build date and Go version of this binary",
		Long: `Print what this binary was built from: its version ("(devel)" for a build
from a checkout that is not a release), the commit (and whether it had
uncommitted changes), the build date (the commit's date, so that two builds
of one commit are the same binary) and the Go version and platform.
trellis --version prints the same.`,
		Example: `  trellis version
  trellis version -o json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if out != cli.FormatTable {
				return cli.WriteValue(e.Stdout, out, build)
			}
			_, err := fmt.Fprint(e.Stdout, build.String())
			return err
		},
	}
	cli.AddOutputFlag(cmd, &out)
	return cmd
}
