package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/cli"
	orchcommand "trellis.dev/trellis/internal/orchestrator/command"
	schedcommand "trellis.dev/trellis/internal/scheduler/command"
)

// requestCounter is an HTTP server that counts what it is sent, to show
// that a refused command sent nothing.
func requestCounter(t *testing.T) (addr string, requests func() int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		http.Error(w, `{"code":"internal","message":"a refused command sent a request"}`, http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, n.Load
}

// walkCommands calls fn for every command of a fresh tree.
func walkCommands(fn func(*cobra.Command)) {
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		fn(c)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd(testEnv("", io.Discard, io.Discard, nil)))
}

// pathArgs is a command's path as arguments: "trellis env create" gives
// env, create.
func pathArgs(c *cobra.Command) []string { return strings.Fields(c.CommandPath())[1:] }

func TestMistypedSubcommandsFail(t *testing.T) {
	for _, tc := range []struct {
		args             []string
		path, word, mean string
	}{
		{[]string{"env", "creat", "x"}, "trellis env", "creat", "create"},
		{[]string{"env", "creat", "x", "--taskdef", "web:1"}, "trellis env", "creat", "create"},
		{[]string{"task", "foo"}, "trellis task", "foo", ""},
		{[]string{"foo"}, "trellis", "foo", ""},
		{[]string{"deploymnt", "list", "web"}, "trellis", "deploymnt", "deployment"},
		{[]string{"operator", "raft", "list-peer"}, "trellis operator raft", "list-peer", "list-peers"},
		{[]string{"agent", "lave"}, "trellis agent", "lave", "leave"},
		{[]string{"help", "env", "creat"}, "trellis env", "creat", "create"},
		{[]string{"help", "nope"}, "trellis", "nope", ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := run(t, "", nil, tc.args...)
			want := `Error: unknown command "` + tc.word + `" for "` + tc.path + `"`
			if code != 2 || out != "" || !strings.HasPrefix(errOut, want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2, no output and %q", code, out, errOut, want)
			}
			if tc.mean != "" && !strings.Contains(errOut, "Did you mean this?\n\t"+tc.mean+"\n") {
				t.Fatalf("no suggestion of %q:\n%s", tc.mean, errOut)
			}
		})
	}
}

// Every command with subcommands refuses a word that is not one of them,
// suggests the subcommand a typo resembles, and a group given no word
// prints its help.
func TestEveryParentCommandRefusesUnknownWords(t *testing.T) {
	walkCommands(func(c *cobra.Command) {
		if !c.HasSubCommands() {
			return
		}
		path := pathArgs(c)
		code, out, errOut := run(t, "", nil, append(path, "zzz")...)
		want := `Error: unknown command "zzz" for "` + c.CommandPath() + `"`
		if code != 2 || out != "" || !strings.HasPrefix(errOut, want) {
			t.Errorf("%s zzz: exit %d, stdout %q, stderr %q", c.CommandPath(), code, out, errOut)
		}
		for _, sub := range c.Commands() {
			if len(sub.Name()) < 4 {
				continue
			}
			typo := sub.Name()[:len(sub.Name())-1]
			code, _, errOut := run(t, "", nil, append(path, typo)...)
			if code != 2 || !strings.Contains(errOut, "Did you mean this?") || !strings.Contains(errOut, "\t"+sub.Name()+"\n") {
				t.Errorf("%s %s: exit %d, no suggestion of %s:\n%s", c.CommandPath(), typo, code, sub.Name(), errOut)
			}
		}
		if isGroup(c) {
			code, out, errOut := run(t, "", nil, path...)
			if code != 0 || !strings.Contains(out, "Available Commands:") || errOut != "" {
				t.Errorf("%s alone: exit %d\n%s%s", c.CommandPath(), code, out, errOut)
			}
		}
	})
}

// TestFlagGroupMistakesAreUsageErrors: flags cobra refuses together (a
// flag group) are a mistake in the call, exit 2, like any other.
func TestFlagGroupMistakesAreUsageErrors(t *testing.T) {
	addr, requests := requestCounter(t)
	code, out, errOut := run(t, "", nil, "ca", "roots", "--pem", "-o", "json", "-addr", addr)
	if code != 2 || out != "" || !strings.Contains(errOut, "if any flags in the group [pem output] are set none of the others can be") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 naming the group", code, out, errOut)
	}
	if n := requests(); n != 0 {
		t.Fatalf("a refused command sent %d requests", n)
	}
}

func TestClosedSetFlagsRefuseOtherValues(t *testing.T) {
	addr, requests := requestCounter(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"task", "list", "--status", "BOGUS", "-addr", addr}, `--status: "BOGUS" is not a task status: use PENDING, RUNNING, STOPPED or LOST`},
		{[]string{"task", "list", "-status=", "-addr", addr}, `--status: "" is not a task status: use PENDING, RUNNING, STOPPED or LOST`},
		{[]string{"env", "list", "--type", "service", "-addr", addr}, `--type: "service" is not an environment type: use daemon`},
		{[]string{"resource", "list", "core/v1/Namespace", "-o", "xml", "-addr", addr}, `-o: "xml" is not an output format: use table, json or yaml`},
		{[]string{"deployment", "list", "web", "--output=wide", "-addr", addr}, `-o: "wide" is not an output format: use table, json or yaml`},
		{[]string{"version", "-o", "text"}, `-o: "text" is not an output format: use table, json or yaml`},
		{[]string{"dev", "-log-level", "loud"}, `--log-level: "loud" is not a log level: use debug, info, warn or error`},
		{[]string{"server", "-data-dir", t.TempDir(), "-log-level", "trace"}, `--log-level: "trace" is not a log level: use debug, info, warn or error`},
		{[]string{"agent", "-log-level", "verbose"}, `--log-level: "verbose" is not a log level`},
		{[]string{"sim", "-log-level", "0"}, `--log-level: "0" is not a log level`},
	} {
		t.Run(strings.Join(tc.args[:2], " "), func(t *testing.T) {
			code, out, errOut := run(t, "", nil, tc.args...)
			if code != 2 || out != "" || !strings.HasPrefix(errOut, "Error: "+tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errOut, tc.want)
			}
		})
	}
	if n := requests(); n != 0 {
		t.Fatalf("refused commands sent %d requests", n)
	}

	// Whatever the case, a value is the listed one.
	root := newRootCmd(testEnv("", io.Discard, io.Discard, nil))
	cmd, rest, err := root.Find([]string{"task", "list", "--status", "running", "-o", "JSON"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatal(err)
	}
	if s, o := cmd.Flag("status").Value.String(), cmd.Flag("output").Value.String(); s != "RUNNING" || o != "json" {
		t.Fatalf("--status running -o JSON read as %q, %q", s, o)
	}
}

// Every flag of these names takes a closed set of values, on every
// command that has one, so that a new command cannot forget it.
func TestEveryClosedSetFlagIsChecked(t *testing.T) {
	sets := map[string][]string{
		"output": cli.OutputFormats, "status": orchcommand.TaskStatuses, "type": schedcommand.EnvironmentTypes, "log-level": logLevels,
	}
	seen := map[string]int{}
	walkCommands(func(c *cobra.Command) {
		for name, values := range sets {
			f := c.Flags().Lookup(name)
			if f == nil {
				continue
			}
			seen[name]++
			ch, ok := f.Value.(*cli.Choice)
			if !ok {
				t.Errorf("%s --%s takes any value", c.CommandPath(), name)
				continue
			}
			if !slices.Equal(ch.Values(), values) {
				t.Errorf("%s --%s takes %v, want %v", c.CommandPath(), name, ch.Values(), values)
			}
		}
	})
	for name := range sets {
		if seen[name] == 0 {
			t.Errorf("no command has --%s", name)
		}
	}
}

// No command accepts an empty or blank positional argument, and none
// sends a request with one.
func TestBlankArgumentsAreRefusedBeforeAnyRequest(t *testing.T) {
	addr, requests := requestCounter(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"resource", "get", "core/v1/Namespace", ""}, "NAME: must not be empty"},
		{[]string{"resource", "delete", "core/v1/Namespace", ""}, "NAME: must not be empty"},
		{[]string{"resource", "delete", "core/v1/Namespace", "  "}, `NAME: "  " is blank`},
		{[]string{"resource", "list", ""}, "TYPE: must not be empty"},
		{[]string{"task", "show", ""}, "TASK: must not be empty"},
		{[]string{"task", "logs", "01jd3k", ""}, "CONTAINER: must not be empty"},
		{[]string{"instance", "set-attribute", "node-1", "zone=a", ""}, "KEY=VALUE: must not be empty"},
		{[]string{"deployment", "stop", "web", ""}, "ID: must not be empty"},
		{[]string{"env", "create", "", "--taskdef", "web:1"}, "NAME: must not be empty"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := run(t, "", nil, append(tc.args, "-addr", addr)...)
			if code != 2 || out != "" || !strings.HasPrefix(errOut, "Error: "+tc.want+"\n") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errOut, tc.want)
			}
		})
	}

	// Every argument of every command, each left empty in turn.
	walkCommands(func(c *cobra.Command) {
		if !c.Runnable() || isGroup(c) {
			return
		}
		names := cli.ArgNames(c.Use)
		for i, name := range names {
			args := pathArgs(c)
			for j := range names {
				if j == i {
					args = append(args, "")
				} else {
					args = append(args, "x")
				}
			}
			if c.Flag("addr") != nil {
				args = append(args, "-addr", addr)
			}
			code, _, errOut := run(t, "", nil, args...)
			if want := "Error: " + name + ": must not be empty\n"; code != 2 || !strings.HasPrefix(errOut, want) {
				t.Errorf("%s with %s empty: exit %d, stderr %q; want %q", c.CommandPath(), name, code, errOut, want)
			}
		}
	})
	if n := requests(); n != 0 {
		t.Fatalf("refused commands sent %d requests", n)
	}
}

// -addr and -token belong to the commands that talk to a server's HTTP
// API. The agent and sim take -token to present to the servers they reach
// at -server; `agent leave` talks to the agent's control socket.
func TestClientFlagsOnlyOnClientCommands(t *testing.T) {
	clients := []string{"resource", "operator", "snapshot", "instance", "taskdef", "task", "env", "deploy", "deployment", "rollback", "ca", "intention", "service"}
	walkCommands(func(c *cobra.Command) {
		path := pathArgs(c)
		if len(path) == 0 {
			if c.Flag("addr") != nil || c.Flag("token") != nil {
				t.Errorf("the root has -addr or -token")
			}
			return
		}
		wantAddr, wantToken := slices.Contains(clients, path[0]), slices.Contains(clients, path[0])
		switch strings.Join(path, " ") {
		case "agent", "sim":
			wantToken = true
		}
		if got := c.Flag("addr") != nil; got != wantAddr {
			t.Errorf("%s: has -addr %v, want %v", c.CommandPath(), got, wantAddr)
		}
		if got := c.Flag("token") != nil; got != wantToken {
			t.Errorf("%s: has -token %v, want %v", c.CommandPath(), got, wantToken)
		}
	})

	// Every command that takes the client flags and runs is declared
	// through cli.Env.Command, so that it parses, prints and fails as the
	// others do; only the groups above them are not.
	walkCommands(func(c *cobra.Command) {
		path := pathArgs(c)
		if len(path) == 0 || !slices.Contains(clients, path[0]) {
			if c.Annotations[cli.ClientAnnotation] != "" {
				t.Errorf("%s: made as a client command", c.CommandPath())
			}
			return
		}
		if declared := c.Annotations[cli.ClientAnnotation] == "true"; declared == isGroup(c) {
			t.Errorf("%s: made by cli.Env.Command %v, a group %v", c.CommandPath(), declared, isGroup(c))
		}
	})

	for _, args := range [][]string{
		{"dev", "-addr", "http://127.0.0.1:1"},
		{"dev", "--token", "t"},
		{"server", "-data-dir", t.TempDir(), "-addr", "http://127.0.0.1:1"},
		{"server", "-data-dir", t.TempDir(), "-token", "t"},
		{"agent", "-addr", "http://127.0.0.1:1"},
		{"sim", "-addr", "http://127.0.0.1:1"},
		{"agent", "leave", "-token", "t"},
	} {
		code, _, errOut := run(t, "", nil, args...)
		flag := strings.TrimLeft(args[len(args)-2], "-")
		if code != 2 || !strings.HasPrefix(errOut, "Error: unknown flag: --"+flag+"\n") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	for _, cmd := range []string{"dev", "server"} {
		_, out, _ := run(t, "", nil, cmd, "--help")
		if strings.Contains(out, " --addr ") || strings.Contains(out, "--token") || strings.Contains(out, "TRELLIS_ADDR") {
			t.Errorf("%s --help shows a client flag:\n%s", cmd, out)
		}
	}

	// The agent still reads -token, with one dash or two.
	root := newRootCmd(testEnv("", io.Discard, io.Discard, nil))
	cmd, rest, err := root.Find(cli.NormalizeArgs([]string{"agent", "-token", "secret", "-server", "127.0.0.1:7701"}, longFlags(root)))
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatal(err)
	}
	if got := cmd.Flag("token").Value.String(); got != "secret" {
		t.Fatalf("agent -token read as %q", got)
	}
}

func TestVersion(t *testing.T) {
	out := mustRun(t, "", "version")
	for _, want := range []string{"trellis ", "\nCommit:      ", "\nBuild date:  ", "\nGo version:  " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("version lacks %q:\n%s", want, out)
		}
	}
	// A test binary records no commit, and no -ldflags stamped one.
	if !strings.HasPrefix(out, "trellis (devel)\nCommit:      unknown\n") {
		t.Errorf("version of a test binary:\n%s", out)
	}
	for _, flag := range []string{"--version", "-version", "-v"} {
		if got := mustRun(t, "", flag); got != out {
			t.Errorf("trellis %s printed\n%s\nwant\n%s", flag, got, out)
		}
	}
	var b cli.Build
	if err := json.Unmarshal([]byte(mustRun(t, "", "version", "-o", "json")), &b); err != nil {
		t.Fatal(err)
	}
	if b.Version != "(devel)" || b.GoVersion != runtime.Version() || b.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Fatalf("version -o json: %+v", b)
	}
}

func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "# bash completion V2 for trellis",
		"zsh":  "#compdef trellis",
		"fish": "# fish completion for trellis",
	} {
		out := mustRun(t, "", "completion", shell)
		if !strings.HasPrefix(out, want) || !strings.Contains(out, "__complete") {
			t.Errorf("completion %s: %.200s", shell, out)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"completion", "powershell"}, `SHELL: "powershell" is not supported: use bash, zsh or fish`},
		{[]string{"completion"}, "SHELL: required: bash, zsh or fish"},
		{[]string{"completion", "bash", "zsh"}, "SHELL: one shell, not 2"},
		{[]string{"completion", ""}, "SHELL: must not be empty"},
	} {
		code, out, errOut := run(t, "", nil, tc.args...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, "Error: "+tc.want+"\n") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q", tc.args, code, out, errOut, tc.want)
		}
	}

	// What the scripts ask the binary: subcommands, and the values of a
	// flag with a closed set.
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", "env", "cr"}, []string{"create"}},
		{[]string{"__complete", "task", "list", "--status", ""}, orchcommand.TaskStatuses},
		{[]string{"__complete", "env", "list", "-o", ""}, cli.OutputFormats},
		{[]string{"__complete", "dev", "--log-level", ""}, logLevels},
		{[]string{"__complete", "completion", ""}, completionShells},
		{[]string{"__complete", "help", "deploym"}, []string{"deployment"}},
	} {
		out := mustRun(t, "", tc.args...)
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if word, _, _ := strings.Cut(line, "\t"); !strings.HasPrefix(word, ":") {
				got = append(got, word)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%v: completed %q, want %q", tc.args, got, tc.want)
		}
	}
}

func TestHelpCommand(t *testing.T) {
	out := mustRun(t, "", "help", "env", "create")
	if !strings.Contains(out, "Create an environment and its first version") || !strings.Contains(out, "trellis env create [NAME]") {
		t.Fatalf("help env create:\n%s", out)
	}
	if out := mustRun(t, "", "help"); !strings.Contains(out, "Available Commands:") || !strings.Contains(out, "trellis [command]") {
		t.Fatalf("help:\n%s", out)
	}
	// A group's usage is its subcommands alone.
	if out := mustRun(t, "", "env", "--help"); !strings.Contains(out, "Usage:\n  trellis env [command]\n\n") {
		t.Fatalf("env --help:\n%s", out)
	}
}

// The first words of a Consul or Nomad user are refused, exit status 2,
// saying what to use instead; none of them is a Trellis command, and every
// command a hint names is one (issue 25).
func TestOtherToolsWordsSayWhatToUse(t *testing.T) {
	root := newRootCmd(testEnv("", io.Discard, io.Discard, nil))
	named := regexp.MustCompile(`trellis ([a-z][a-z-]*(?: [a-z][a-z-]*)?)`)
	for word, hint := range otherTools {
		if c, rest, err := root.Find(strings.Fields(word)); err == nil && c != root && len(rest) == 0 {
			t.Errorf("%q is a Trellis command (%s); take it out of otherTools", word, c.CommandPath())
		}
		for _, m := range named.FindAllStringSubmatch(hint, -1) {
			if c, _, err := root.Find(strings.Fields(m[1])); err != nil || c == root {
				t.Errorf("the hint for %q names %q, which is no command", word, m[0])
			}
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"members"}, "trellis instance list"},
		{[]string{"services"}, "trellis service list"},
		{[]string{"catalog", "services"}, "trellis service list"},
		{[]string{"node", "status"}, "trellis instance list"},
		{[]string{"job", "run", "web.nomad"}, "trellis task run"},
		{[]string{"alloc", "status", "x", "-verbose"}, "trellis task show TASK"},
		{[]string{"help", "members"}, "trellis instance list"},
		// Two words say more than the first: Consul's catalog nodes are instances.
		{[]string{"catalog", "nodes"}, "trellis instance list"},
		{[]string{"help", "catalog", "nodes"}, "trellis instance list"},
		{[]string{"acl", "bootstrap"}, "does not enforce ACLs yet"},
		{[]string{"ui"}, "no web UI yet"},
		// A word given to a command of Trellis: Nomad's and Consul's.
		{[]string{"server", "members"}, "trellis operator raft list-peers"},
		{[]string{"help", "server", "members"}, "trellis operator raft list-peers"},
		{[]string{"connect", "ca", "get-config"}, "trellis ca config get"},
		{[]string{"connect", "envoy", "-sidecar-for", "web"}, "the sidecar proxy is trellis proxy"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := run(t, "", nil, tc.args...)
			words := tc.args
			if words[0] == "help" {
				words = words[1:]
			}
			path, word := "trellis", words[0]
			if words[0] == "server" || words[0] == "connect" {
				path, word = "trellis "+words[0], words[1]
			}
			prefix := `Error: unknown command "` + word + `" for "` + path + `": `
			if code != 2 || out != "" || !strings.HasPrefix(errOut, prefix) || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2, no output, and %q saying %q", code, out, errOut, prefix, tc.want)
			}
		})
	}
	// A mistyped subcommand of a group is still only that.
	for _, args := range [][]string{{"task", "members"}, {"connect", "members"}, {"server", "nodes"}} {
		if _, _, errOut := run(t, "", nil, args...); !strings.HasPrefix(errOut, `Error: unknown command "`+args[1]+`" for "trellis `+args[0]+`"`+"\n") {
			t.Errorf("trellis %s: %q; want a plain unknown command", strings.Join(args, " "), errOut)
		}
	}
}

// A recursor that is not an address, or one with the agent's DNS off, is
// refused before the agent starts.
func TestAgentDNSRecursorMistakes(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-dns-recursor", "dns.example"}, `-dns-recursor: "dns.example" is not an IP address or ADDR:PORT (10.0.0.2, 10.0.0.2:53, [fd00::2]:53)`},
		{[]string{"-dns-recursor", "10.0.0.2:0"}, `-dns-recursor: "10.0.0.2:0": the port must be 1 to 65535`},
		{[]string{"-dns-addr", "", "-dns-recursor", "10.0.0.2"}, `-dns-recursor: needs the agent's DNS, which -dns-addr "" turns off`},
	} {
		args := append([]string{"agent", "-server", "127.0.0.1:1", "-data-dir", dir, "-bridge-name", "trnone0", "-cni-plugin-dir", dir}, tc.args...)
		code, out, errOut := run(t, "", nil, args...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, "Error: "+tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, out, errOut, tc.want)
		}
	}
}
