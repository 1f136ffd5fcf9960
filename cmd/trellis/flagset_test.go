package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden files of testdata/ with what the code does")

// TestFlagSetsAndCommands holds the command tree and the flags of the
// processes (server, agent, dev) to testdata/commands.golden: moving a
// flag or a command from one package to another (a module owns its flags
// and commands) must leave what a user types and reads unchanged. A change
// meant to be seen is reviewed as a diff of the file (go test -rewrite).
func TestFlagSetsAndCommands(t *testing.T) {
	root := newRootCmd(testEnv("", &bytes.Buffer{}, &bytes.Buffer{}, nil))
	var b strings.Builder
	b.WriteString("# commands\n")
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden {
			return
		}
		fmt.Fprintf(&b, "%s\n", c.CommandPath())
		subs := c.Commands()
		sort.Slice(subs, func(i, j int) bool { return subs[i].Name() < subs[j].Name() })
		for _, s := range subs {
			walk(s)
		}
	}
	walk(root)
	for _, name := range []string{"server", "agent", "dev"} {
		cmd, _, err := root.Find([]string{name})
		if err != nil || cmd.Name() != name {
			t.Fatalf("find %s: %v", name, err)
		}
		fmt.Fprintf(&b, "\n# trellis %s flags\n", name)
		var lines []string
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			lines = append(lines, fmt.Sprintf("-%s %s default=%q\n    %s", f.Name, f.Value.Type(), f.DefValue, f.Usage))
		})
		sort.Strings(lines)
		b.WriteString(strings.Join(lines, "\n") + "\n")
	}
	golden := filepath.Join("testdata", "commands.golden")
	if *rewrite {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("the commands or the flags of server, agent or dev changed (go test -run TestFlagSetsAndCommands -rewrite to accept, then review the diff):\n%s", lineDiff(string(want), got))
	}
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}
