package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"trellis.dev/trellis/internal/cli"
)

// groupAnnotation marks a command that only groups subcommands (env,
// task, operator raft, ...).
const groupAnnotation = "trellis/group"

// harden makes every command of the tree refuse a mistake the same way,
// before it sends any request, so that no mistake ends in help and exit
// status 0. It is done once here, over the whole tree, so that a command
// added later gets it too:
//
//   - A word that is not a subcommand is an unknown command, with the
//     subcommands it resembles. cobra does this for the root only: any
//     other group printed its help and exited 0 for `trellis env creat`.
//     So a group gets a RunE of its own, which prints its help when given
//     no word at all.
//   - No positional argument may be empty or blank, named by the command's
//     usage line: an empty name would reach the API as the collection's
//     path (resource delete TYPE "").
//   - A flag with a closed set of values (a *cli.Choice) completes them
//     in the shell; its values are checked when it is parsed.
func harden(c *cobra.Command) {
	c.SuggestionsMinimumDistance = 2
	if c.HasSubCommands() && !c.Runnable() {
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[groupAnnotation] = "true"
		c.DisableFlagsInUseLine = true
		c.Args = cobra.NoArgs
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
	c.Args = checkedArgs(c.Args, cli.ArgNames(c.Use))
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if ch, ok := f.Value.(*cli.Choice); ok {
			// Registering can only fail for a flag registered twice, a
			// mistake in this file that every test would hit.
			if err := c.RegisterFlagCompletionFunc(f.Name, cobra.FixedCompletions(ch.Values(), cobra.ShellCompDirectiveNoFileComp)); err != nil {
				panic(err)
			}
		}
	})
	for _, sub := range c.Commands() {
		harden(sub)
	}
}

// groupUsage edits cobra's usage template so that a group shows only
// "trellis env [command]" as its usage, not also "trellis env": its RunE
// is there to refuse mistakes, not to be run.
func groupUsage(tmpl string) string {
	return strings.Replace(tmpl, "{{if .Runnable}}", `{{if and .Runnable (ne (index .Annotations "`+groupAnnotation+`") "true")}}`, 1)
}

// isGroup reports whether cmd only groups subcommands.
func isGroup(cmd *cobra.Command) bool { return cmd.Annotations[groupAnnotation] == "true" }

// checkedArgs wraps a command's argument check: positional arguments that
// the check refuses on a command with subcommands are an unknown command;
// those it accepts must not be blank.
func checkedArgs(check cobra.PositionalArgs, names []string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if check != nil {
			if err := check(cmd, args); err != nil {
				if cmd.HasSubCommands() && len(args) > 0 {
					return unknownCommand(cmd, args)
				}
				if hint := otherToolsHint(cmd, args); hint != "" {
					return cli.Usage(fmt.Errorf("%w: %s", cli.UnknownCommand(cmd.CommandPath(), args[0], nil), hint))
				}
				return err
			}
		}
		if err := cli.CheckArgsNotBlank(names, args); err != nil {
			return cli.Usage(err)
		}
		return nil
	}
}

// unknownCommand refuses words[0], which is not a subcommand of cmd, with
// the subcommands it resembles; the words of another tool say what to use
// instead (otherTools).
func unknownCommand(cmd *cobra.Command, words []string) error {
	word := words[0]
	if hint := otherToolsHint(cmd, words); hint != "" {
		return cli.Usage(fmt.Errorf("%w: %s", cli.UnknownCommand(cmd.CommandPath(), word, nil), hint))
	}
	return cli.Usage(cli.UnknownCommand(cmd.CommandPath(), word, cmd.SuggestionsFor(word)))
}

// otherToolsHint is what otherTools says of words given to cmd: of its
// first two words after cmd's path (catalog nodes), else of the first
// (catalog, server members); "" when it says nothing.
func otherToolsHint(cmd *cobra.Command, words []string) string {
	if len(words) == 0 {
		return ""
	}
	key := words[0]
	if cmd.HasParent() { // the path without "trellis "
		_, below, _ := strings.Cut(cmd.CommandPath(), " ")
		key = below + " " + key
	}
	if len(words) > 1 {
		if hint, ok := otherTools[key+" "+words[1]]; ok {
			return hint
		}
	}
	return otherTools[key]
}

// flagError words the flag errors of every command. A value outside a
// closed set names the flag and the values it takes. A group that fails
// to parse a flag was most likely given a mistyped subcommand followed by
// that subcommand's flags (`trellis env creat x --taskdef t`): the unknown
// command is the mistake to report.
func flagError(cmd *cobra.Command, err error) error {
	var ie *pflag.InvalidValueError
	var ce *cli.ChoiceError
	if errors.As(err, &ie) && errors.As(err, &ce) {
		return cli.Usage(fmt.Errorf("%s: %w", flagLabel(ie.GetFlag()), ce))
	}
	if isGroup(cmd) {
		if words := cmd.Flags().Args(); len(words) > 0 {
			return unknownCommand(cmd, words)
		}
	}
	return cli.Usage(err)
}

// flagLabel names a flag as --help lists it: its shorthand, or its long
// name.
func flagLabel(f *pflag.Flag) string {
	if f.Shorthand != "" {
		return "-" + f.Shorthand
	}
	return "--" + f.Name
}

// newHelpCmd is `trellis help [COMMAND...]`. cobra's own prints the root's
// help and exits 0 for a topic that does not exist; this one refuses it as
// an unknown command.
func newHelpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "help [COMMAND]...",
		Short: "Help about any command",
		Example: `  trellis help env create
  trellis env create --help     # the same`,
		RunE: func(cmd *cobra.Command, args []string) error {
			target, rest, err := cmd.Root().Find(args)
			if err != nil {
				return cli.Usage(err)
			}
			if len(rest) > 0 {
				return unknownCommand(target, rest)
			}
			return target.Help()
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			target, rest, err := cmd.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var words []cobra.Completion
			for _, sub := range target.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					words = append(words, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return words, cobra.ShellCompDirectiveNoFileComp
		},
	}
}
