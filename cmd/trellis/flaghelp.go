package main

import (
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"trellis.dev/trellis/internal/module"
)

// localFlagsSection is the part of cobra's usage template that lists a
// command's own flags.
const localFlagsSection = "{{if .HasAvailableLocalFlags}}\n\nFlags:\n{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}"

// moduleFlagsUsage edits cobra's usage template so that the flags a module
// declares (trellis server's and dev's, module.FlagModuleAnnotation) are
// listed under their module, after the command's own. A command without
// them reads as before. It panics when the template has no such section
// (a new cobra): the help would lose the flags.
func moduleFlagsUsage(tmpl string) string {
	if !strings.Contains(tmpl, localFlagsSection) {
		panic("cobra's usage template has no flags section to group by module")
	}
	cobra.AddTemplateFunc("flagSections", flagSections)
	return strings.Replace(tmpl, localFlagsSection, "{{if .HasAvailableLocalFlags}}{{flagSections .LocalFlags}}{{end}}", 1)
}

// flagSections renders fs as "Flags:" (those of the command itself) and
// one "Flags of the <module> module:" per module, in the modules' names'
// order, each aligned on its own.
func flagSections(fs *pflag.FlagSet) string {
	own := pflag.NewFlagSet("", pflag.ContinueOnError)
	byModule := map[string]*pflag.FlagSet{}
	fs.VisitAll(func(f *pflag.Flag) {
		set := own
		if names := f.Annotations[module.FlagModuleAnnotation]; len(names) > 0 {
			if byModule[names[0]] == nil {
				byModule[names[0]] = pflag.NewFlagSet(names[0], pflag.ContinueOnError)
			}
			set = byModule[names[0]]
		}
		set.AddFlag(f)
	})
	var b strings.Builder
	section := func(title string, set *pflag.FlagSet) {
		if usages := strings.TrimRight(set.FlagUsages(), " \t\n"); usages != "" {
			b.WriteString("\n\n" + title + ":\n" + usages)
		}
	}
	section("Flags", own)
	names := make([]string, 0, len(byModule))
	for name := range byModule {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		section("Flags of the "+name+" module", byModule[name])
	}
	return b.String()
}
