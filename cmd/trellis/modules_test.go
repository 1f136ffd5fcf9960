package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/server"
)

func mustCmd(cmd *cobra.Command, err error) *cobra.Command {
	if err != nil {
		panic(err)
	}
	return cmd
}

// flagger is a module that declares flags (and, with cmd, a command):
// enough to clash with the default modules.
type flagger struct {
	name, flag string
	cmd        string
	value      string
}

func (f *flagger) Name() string                          { return f.name }
func (*flagger) Register(*resource.Registry)             {}
func (*flagger) Setup(module.Deps) (module.Parts, error) { return module.Parts{}, nil }
func (f *flagger) Flags(fs *pflag.FlagSet, p module.Process) {
	fs.StringVar(&f.value, f.flag, "", "a test flag")
}
func (*flagger) CheckFlags(module.Settings) error { return nil }
func (f *flagger) Commands(cli.CommandEnv) []*cobra.Command {
	if f.cmd == "" {
		return nil
	}
	return []*cobra.Command{{Use: f.cmd, Run: func(*cobra.Command, []string) {}}}
}

// A flag or a command that two modules declare, or that a module declares
// and the CLI has already, fails every command line at once, naming both
// owners: nothing runs with one of the two silently winning.
func TestClashingModulesAreRefusedAtStartup(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []module.Module
		want  string
	}{
		{"flag of another module", []module.Module{&flagger{name: "dns", flag: "heartbeat-ttl"}},
			"module dns declares the flag -heartbeat-ttl, which module orchestrator declares too: every flag has one owner"},
		{"flag of the process", []module.Module{&flagger{name: "dns", flag: "http-addr"}},
			"module dns declares the flag -http-addr, which trellis server itself declares too"},
		{"flag of two new modules", []module.Module{&flagger{name: "a", flag: "example-addr"}, &flagger{name: "b", flag: "example-addr"}},
			"module b declares the flag -example-addr, which module a declares too"},
		{"command of another module", []module.Module{&flagger{name: "dns", flag: "example-addr", cmd: "ca"}},
			`module dns gives the command "ca", which module ca gives too`},
		{"command of the CLI", []module.Module{&flagger{name: "dns", flag: "example-addr", cmd: "resource"}},
			`module dns gives the command "resource", which the CLI itself gives too`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mods := func() []module.Module {
				var fresh []module.Module
				for _, m := range tc.extra {
					c := *m.(*flagger)
					fresh = append(fresh, &c)
				}
				return append(server.DefaultModules(), fresh...)
			}
			var stderr bytes.Buffer
			code := executeWith(context.Background(), []string{"version"}, testEnv("", &bytes.Buffer{}, &stderr, nil), mods)
			if code != 1 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("trellis version with clashing modules = %d, %q; want 1 and %q", code, stderr.String(), tc.want)
			}
		})
	}
}

// A module's flag is on the command line of the processes it names, in
// the help under its module, and its value reaches the module the server
// sets up; one the module does not declare for a process is refused there.
func TestModuleFlagsOnTheCommandLine(t *testing.T) {
	e := testEnv("", &bytes.Buffer{}, &bytes.Buffer{}, nil)
	mods := []module.Module{&flagger{name: "dns", flag: "example-addr"}}
	cmd := mustCmd(newServerCmd(e, append(server.DefaultModules(), mods...)))
	if err := cmd.ParseFlags([]string{"--example-addr", "127.0.0.1:8600", "--heartbeat-ttl", "3s"}); err != nil {
		t.Fatal(err)
	}
	if got := mods[0].(*flagger).value; got != "127.0.0.1:8600" {
		t.Errorf("the module's -example-addr = %q, want 127.0.0.1:8600", got)
	}
	f := cmd.Flags().Lookup("example-addr")
	if f == nil || f.Annotations[module.FlagModuleAnnotation][0] != "dns" {
		t.Errorf("-example-addr is not annotated with its module: %+v", f)
	}
	for name, want := range map[string]string{"heartbeat-ttl": "orchestrator", "primary-datacenter": "ca", "connect-server-certs": "ca"} {
		if f := cmd.Flags().Lookup(name); f == nil || f.Annotations[module.FlagModuleAnnotation][0] != want {
			t.Errorf("-%s is not module %s's: %+v", name, want, f)
		}
	}
	dev := mustCmd(newDevCmd(e, server.DefaultModules()))
	if dev.Flags().Lookup("primary-datacenter") != nil || dev.Flags().Lookup("heartbeat-ttl") == nil {
		t.Error("trellis dev takes the orchestrator's -heartbeat-ttl and none of the CA's server flags")
	}
}

// trellis server --help lists each module's flags under its module, after
// the command's own; a command without module flags reads as before.
func TestHelpGroupsFlagsByModule(t *testing.T) {
	help := func(args ...string) string {
		var out bytes.Buffer
		if code := execute(context.Background(), append(args, "--help"), testEnv("", &out, &out, nil)); code != 0 {
			t.Fatalf("%v --help = %d: %s", args, code, out.String())
		}
		return out.String()
	}
	s := help("server")
	own, ca, orch := strings.Index(s, "\nFlags:\n"), strings.Index(s, "\nFlags of the ca module:\n"), strings.Index(s, "\nFlags of the orchestrator module:\n")
	if own < 0 || ca < own || orch < ca {
		t.Fatalf("trellis server --help has no sections Flags, then the ca and orchestrator modules':\n%s", s)
	}
	for flag, at := range map[string]int{"--primary-datacenter": ca, "--connect-server-certs": ca, "--heartbeat-ttl": orch, "--data-dir": own} {
		if i := strings.Index(s, flag); i < at {
			t.Errorf("%s is not in its section of trellis server --help", flag)
		}
	}
	if i := strings.Index(s, "--primary-datacenter"); i > orch {
		t.Error("--primary-datacenter is under the orchestrator module")
	}
	if d := help("dev"); !strings.Contains(d, "\nFlags of the orchestrator module:\n") || strings.Contains(d, "ca module") {
		t.Errorf("trellis dev --help: want the orchestrator's section and no ca section:\n%s", d)
	}
	if a := help("agent"); strings.Contains(a, "module:") || !strings.Contains(a, "\nFlags:\n") {
		t.Errorf("trellis agent --help changed its flags section:\n%s", a)
	}
}
