package main

import (
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	"trellis.dev/trellis/internal/cli"
)

// completionShells are the shells `trellis completion` writes a script
// for.
var completionShells = []string{"bash", "zsh", "fish"}

func newCompletionCmd(e *cli.Env) *cobra.Command {
	return &cobra.Command{
		Use:   "completion SHELL",
		Short: "Print the shell completion script for bash, zsh or fish",
		Long: `Print a script that makes the shell complete trellis commands, flags and the
values of flags that take a fixed set (-o, --status, --log-level, ...).

  bash  needs the bash-completion package. For this shell only:
          source <(trellis completion bash)
        for every shell:
          trellis completion bash > /etc/bash_completion.d/trellis
  zsh   with compinit enabled (autoload -U compinit; compinit in ~/.zshrc):
          trellis completion zsh > "${fpath[1]}/_trellis"
  fish  trellis completion fish > ~/.config/fish/completions/trellis.fish

Start a new shell for it to take effect.`,
		Example: `  source <(trellis completion bash)
  trellis completion zsh > "${fpath[1]}/_trellis"
  trellis completion fish > ~/.config/fish/completions/trellis.fish`,
		ValidArgs: completionShells,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return cli.Usage(errors.New("SHELL: required: bash, zsh or fish"))
			case len(args) > 1:
				return cli.Usage(fmt.Errorf("SHELL: one shell, not %d", len(args)))
			case args[0] != "" && !slices.Contains(completionShells, args[0]):
				return cli.Usage(fmt.Errorf("SHELL: %q is not supported: use bash, zsh or fish", args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(e.Stdout, true)
			case "zsh":
				return root.GenZshCompletion(e.Stdout)
			default:
				return root.GenFishCompletion(e.Stdout, true)
			}
		},
	}
}
