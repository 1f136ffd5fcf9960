package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/testlog"
)

func testEnv(stdin string, stdout, stderr io.Writer, vars map[string]string) *cli.Env {
	return &cli.Env{
		Stdin:  strings.NewReader(stdin),
		Stdout: stdout,
		Stderr: stderr,
		Getenv: func(k string) string { return vars[k] },
		Now:    time.Now,
	}
}

// startDev runs `trellis dev` in process on free ports and returns its HTTP
// URL, read from what it prints.
func startDev(t *testing.T, extra ...string) string {
	t.Helper()
	pr, pw := io.Pipe()
	stderr := &testlog.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- execute(ctx, append([]string{"dev", "-http-addr", "127.0.0.1:0", "-grpc-addr", "127.0.0.1:0", "-dns-addr", "127.0.0.1:0", "-log-level", "warn"}, extra...),
			testEnv("", pw, stderr, nil))
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("dev exited %d: %s", code, stderr)
		}
	})

	var banner strings.Builder
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		banner.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "Press Ctrl-C") {
			break
		}
	}
	go io.Copy(io.Discard, pr) //nolint:errcheck // nothing more is expected
	m := regexp.MustCompile(`HTTP API:\s+(http://127\.0\.0\.1:\d+)`).FindStringSubmatch(banner.String())
	if m == nil {
		t.Fatalf("dev printed no HTTP address:\n%s\nstderr: %s", banner.String(), stderr)
	}
	for _, want := range []string{"gRPC API:  127.0.0.1:", "Try this", "trellis resource apply -addr " + m[1] + " -f -", "trellis resource list -addr " + m[1]} {
		if !strings.Contains(banner.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, banner.String())
		}
	}
	// In memory there is no Raft, and nothing listens on -raft-addr.
	if slices.Contains(extra, "-data-dir") != strings.Contains(banner.String(), "Raft:") {
		t.Errorf("the banner of dev %v names a Raft address only with -data-dir:\n%s", extra, banner.String())
	}
	return m[1]
}

// run runs the command line in process and returns its exit status and
// output.
func run(t *testing.T, stdin string, vars map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := execute(context.Background(), args, testEnv(stdin, &stdout, &stderr, vars))
	return code, stdout.String(), stderr.String()
}

func mustRun(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	code, out, errOut := run(t, stdin, nil, args...)
	if code != 0 {
		t.Fatalf("trellis %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

const spec = `# three namespaces, YAML and JSON
type: core/v1/Namespace
name: payments
metadata: {team: payments}
data:
  description: services of the payments team
---
{"type": "core/v1/Namespace", "name": "search", "data": {"description": "search"}}
--- {type: core/v1/Namespace, name: staging}
`

func TestResourceCommandsAgainstDev(t *testing.T) {
	addr := startDev(t)
	file := filepath.Join(t.TempDir(), "ns.yaml")
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}

	out := mustRun(t, "", "resource", "apply", "-addr", addr, "-f", file)
	for _, name := range []string{"payments", "search", "staging"} {
		if !strings.Contains(out, "core/v1/Namespace/"+name+" applied (version ") {
			t.Errorf("apply output lacks %s:\n%s", name, out)
		}
	}
	// From stdin, with the address from the environment.
	code, out, errOut := run(t, "{type: core/v1/Namespace, name: web}", map[string]string{"TRELLIS_ADDR": addr},
		"resource", "apply", "-f", "-")
	if code != 0 || !strings.Contains(out, "core/v1/Namespace/web applied") {
		t.Fatalf("apply from stdin: %d %s %s", code, out, errOut)
	}

	// get: a table, and -o json exactly as the API returns it.
	out = mustRun(t, "", "resource", "get", "core/v1/Namespace", "payments", "-addr", addr)
	if !regexp.MustCompile(`^NAME\s+VERSION\s+GENERATION\s+AGE\npayments\s+\d+\s+1\s+\d+s\n$`).MatchString(out) {
		t.Fatalf("get table:\n%s", out)
	}
	out = mustRun(t, "", "resource", "get", "core/v1/Namespace", "payments", "-addr", addr, "-o", "json")
	resp, err := http.Get(addr + "/v1/resources/core/v1/Namespace/payments")
	if err != nil {
		t.Fatal(err)
	}
	api, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	sameJSON(t, []byte(out), api)

	// list -o json and -o yaml: the API's list.
	out = mustRun(t, "", "resource", "list", "core/v1/Namespace", "-addr", addr, "-o", "json")
	var list struct {
		Resources []struct {
			ID struct{ Name string } `json:"id"`
		} `json:"resources"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("list -o json: %v\n%s", err, out)
	}
	var names []string
	for _, r := range list.Resources {
		names = append(names, r.ID.Name)
	}
	if strings.Join(names, ",") != "default,payments,search,staging,web" {
		t.Fatalf("listed %v", names)
	}
	yamlOut := mustRun(t, "", "resource", "list", "core/v1/Namespace", "-addr", addr, "-o", "yaml")
	js, err := yaml.YAMLToJSON([]byte(yamlOut))
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, js, []byte(out))
	out = mustRun(t, "", "resource", "list", "core/v1/Namespace", "-addr", addr, "--prefix", "s")
	if !strings.Contains(out, "search") || !strings.Contains(out, "staging") || strings.Contains(out, "payments") {
		t.Fatalf("list --prefix s:\n%s", out)
	}

	// delete, then get fails with the server's message.
	out = mustRun(t, "", "resource", "delete", "core/v1/Namespace", "staging", "-addr", addr)
	if out != "core/v1/Namespace/staging deleted\n" {
		t.Fatalf("delete: %q", out)
	}
	code, _, errOut = run(t, "", nil, "resource", "get", "core/v1/Namespace", "staging", "-addr", addr)
	if code != 1 || !strings.Contains(errOut, "Error: ") || !strings.Contains(errOut, "not found") {
		t.Fatalf("get deleted: %d %q", code, errOut)
	}
}

func sameJSON(t *testing.T, a, b []byte) {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%v: %s", err, a)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	ca, _ := json.Marshal(va)
	cb, _ := json.Marshal(vb)
	if !bytes.Equal(ca, cb) {
		t.Fatalf("JSON differs:\n%s\n%s", ca, cb)
	}
}

func TestWatchCommand(t *testing.T) {
	addr := startDev(t)
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr testlog.Buffer
	go func() {
		done <- execute(ctx, []string{"resource", "watch", "core/v1/Namespace", "-addr", addr, "-o", "json"}, testEnv("", pw, &stderr, nil))
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	next := func() map[string]any {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("watch output ended: %v %s", lines.Err(), stderr.String())
		}
		var ev map[string]any
		if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
			t.Fatalf("%v: %s", err, lines.Text())
		}
		return ev
	}
	if ev := next(); ev["op"] != "upsert" {
		t.Fatalf("first event %v", ev)
	}
	if ev := next(); ev["op"] != "end_of_snapshot" {
		t.Fatalf("second event %v", ev)
	}
	mustRun(t, "{type: core/v1/Namespace, name: watched}", "resource", "apply", "-addr", addr, "-f", "-")
	ev := next()
	res, _ := ev["resource"].(map[string]any)
	id, _ := res["id"].(map[string]any)
	if ev["op"] != "upsert" || id["name"] != "watched" {
		t.Fatalf("change event %v", ev)
	}
	cancel()
	go io.Copy(io.Discard, pr) //nolint:errcheck
	if code := <-done; code != 0 {
		t.Fatalf("watch exited %d: %s", code, stderr.String())
	}
}

func TestCommandErrors(t *testing.T) {
	addr := startDev(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("type: core/v1/Namespace\nname: ok\n---\ntype: core/v1/Namespace\nname: typo\nnmae: x\n"), 0o644)

	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		code  int
		want  string
	}{
		{"bad spec writes nothing", []string{"resource", "apply", "-addr", addr, "-f", bad}, "", 1, `bad.yaml:6: nmae: unknown field: did you mean name?`},
		{"missing file", []string{"resource", "apply", "-addr", addr, "-f", filepath.Join(dir, "nope.yaml")}, "", 1, "-f: open"},
		{"no -f", []string{"resource", "apply", "-addr", addr}, "", 2, "-f: required"},
		{"a bad name", []string{"resource", "apply", "-addr", addr, "-f", "-"}, "{type: core/v1/Namespace, name: Bad_Name}", 1, `stdin:1: name: "Bad_Name" is not a valid name`},
		{"bad data", []string{"resource", "apply", "-addr", addr, "-f", "-"}, "{type: core/v1/Namespace, name: x, data: {color: red}}", 1, `stdin:1: data.color: unknown field (Namespace has: description)`},
		{"server refuses a type", []string{"resource", "apply", "-addr", addr, "-f", "-"}, "{type: core/v9/Nope, name: x}", 1, `stdin:1: core/v9/Nope x: type: unknown resource type core/v9/Nope`},
		{"unknown type", []string{"resource", "list", "core/v9/Nope", "-addr", addr}, "", 1, "type: unknown resource type core/v9/Nope"},
		{"bad TYPE", []string{"resource", "list", "Namespace", "-addr", addr}, "", 2, `TYPE: "Namespace" is not group/version/kind`},
		{"wrong arg count", []string{"resource", "get", "core/v1/Namespace"}, "", 2, "accepts 2 arg(s)"},
		{"bad output", []string{"resource", "list", "core/v1/Namespace", "-o", "xml"}, "", 2, `-o: "xml" is not an output format: use table, json or yaml`},
		{"-A and -n", []string{"resource", "list", "core/v1/Namespace", "-A", "-n", "x"}, "", 2, "-A: give either"},
		{"unknown flag", []string{"resource", "list", "core/v1/Namespace", "--nope"}, "", 2, "unknown flag: --nope"},
		{"unreachable server", []string{"resource", "list", "core/v1/Namespace", "-addr", "http://127.0.0.1:1"}, "", 1, "cannot reach the Trellis server at http://127.0.0.1:1"},
		{"bad address", []string{"resource", "list", "core/v1/Namespace", "-addr", "ftp://x"}, "", 2, "-addr: bad server address"},
		{"server: no data dir", []string{"server"}, "", 2, "-data-dir: required"},
		{"server: bad address", []string{"server", "-data-dir", dir, "-http-addr", "localhost"}, "", 2, `-http-addr: "localhost" is not host:port`},
		{"server: bad retry-join", []string{"server", "-data-dir", dir, "-retry-join", "10.0.0.1"}, "", 2, `-retry-join: "10.0.0.1" is not host:port (for example 127.0.0.1:7703)`},
		{"server: missing TLS file", []string{"server", "-data-dir", dir, "-tls-ca-file", filepath.Join(dir, "nope.pem"), "-tls-cert-file", "s.pem", "-tls-key-file", "k.pem"}, "", 2, "-tls-ca-file"},
		{"server: TLS without a certificate", []string{"server", "-data-dir", dir, "-tls-ca-file", "ca.pem"}, "", 2, "-tls-cert-file: required on a server"},
		{"server: bad bootstrap-expect", []string{"server", "-data-dir", dir, "-bootstrap-expect", "-2"}, "", 2, "-bootstrap-expect: -2"},
		{"server: not a number", []string{"server", "-data-dir", dir, "-bootstrap-expect", "three"}, "", 2, `invalid argument "three"`},
		{"server: datacenter not a DNS label", []string{"server", "-data-dir", dir, "-datacenter", "Dc_1"}, "", 2, `-datacenter: "Dc_1" is not a datacenter name`},
		{"server: secondary without an address", []string{"server", "-data-dir", dir, "-datacenter", "dc2", "-primary-datacenter", "dc1"}, "", 2, `-primary-address: required`},
		{"server: primary address on a primary", []string{"server", "-data-dir", dir, "-primary-address", "10.0.0.1:7703"}, "", 2, `-primary-address: only a secondary datacenter takes it`},
		{"server: bad primary address", []string{"server", "-data-dir", dir, "-datacenter", "dc2", "-primary-datacenter", "dc1", "-primary-address", "10.0.0.1:7703,nope"}, "", 2, `-primary-address: "nope" is not host:port (for example 127.0.0.1:7703)`},
		{"server: bad primary datacenter", []string{"server", "-data-dir", dir, "-primary-datacenter", "DC1"}, "", 2, `-primary-datacenter: "DC1" is not a datacenter name`},
		{"server: raft multiplier too big", []string{"server", "-data-dir", dir, "-raft-multiplier", "11"}, "", 2, "-raft-multiplier: 11 is out of range: give an integer from 1 (a LAN) to 10"},
		{"server: raft multiplier zero", []string{"server", "-data-dir", dir, "-raft-multiplier", "0"}, "", 2, "-raft-multiplier: 0 is out of range"},
		{"server: raft multiplier negative", []string{"server", "-data-dir", dir, "-raft-multiplier", "-3"}, "", 2, "-raft-multiplier: -3 is out of range"},
		{"server: raft multiplier not an integer", []string{"server", "-data-dir", dir, "-raft-multiplier", "1.5"}, "", 2, `invalid argument "1.5" for "--raft-multiplier"`},
		{"dev: bad log level", []string{"dev", "-log-level", "loud", "-http-addr", "127.0.0.1:0", "-grpc-addr", "127.0.0.1:0"}, "", 2, "-log-level"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := run(t, tc.stdin, nil, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, errOut, tc.code, tc.want)
			}
		})
	}
	// The refused file wrote nothing, not even its valid first document.
	if code, _, _ := run(t, "", nil, "resource", "get", "core/v1/Namespace", "ok", "-addr", addr); code != 1 {
		t.Fatal("the valid document of a refused file was written")
	}
}

// The contract's flags are written with one dash; two work as well.
func TestSingleDashFlagsParse(t *testing.T) {
	for _, args := range [][]string{
		{"server", "-data-dir", "/d", "-http-addr", "127.0.0.1:1", "-grpc-addr", "127.0.0.1:2", "-raft-addr", "127.0.0.1:3", "-server-addr", "127.0.0.1:4",
			"-bootstrap-expect", "3", "-retry-join", "10.0.0.2:7703", "-retry-join=10.0.0.3:7703"},
		{"server", "--data-dir", "/d", "--http-addr=127.0.0.1:1", "--grpc-addr", "127.0.0.1:2", "--raft-addr", "127.0.0.1:3", "--server-addr=127.0.0.1:4",
			"--bootstrap-expect", "3", "--retry-join", "10.0.0.2:7703", "--retry-join", "10.0.0.3:7703"},
	} {
		root := newRootCmd(testEnv("", io.Discard, io.Discard, nil))
		cmd, rest, err := root.Find(cli.NormalizeArgs(args, longFlags(root)))
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		get := func(name string) string {
			f := cmd.Flags().Lookup(name)
			if f == nil {
				t.Fatalf("no flag %s", name)
			}
			return f.Value.String()
		}
		for name, want := range map[string]string{
			"data-dir": "/d", "http-addr": "127.0.0.1:1", "grpc-addr": "127.0.0.1:2", "raft-addr": "127.0.0.1:3", "server-addr": "127.0.0.1:4",
			"bootstrap-expect": "3", "retry-join": "[10.0.0.2:7703,10.0.0.3:7703]",
		} {
			if got := get(name); got != want {
				t.Errorf("%v: -%s = %q, want %q", args, name, got, want)
			}
		}
	}
}

func TestEveryCommandHasHelpWithAnExample(t *testing.T) {
	root := newRootCmd(testEnv("", io.Discard, io.Discard, nil))
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		// A group's help lists its subcommands, which have the examples.
		if c.Runnable() && !isGroup(c) {
			if c.Short == "" || c.Example == "" {
				t.Errorf("%s: no short help or no example", c.CommandPath())
			}
			args := append(strings.Fields(c.CommandPath())[1:], "-help")
			code, out, _ := run(t, "", nil, args...)
			desc := c.Short
			if c.Long != "" {
				desc = c.Long
			}
			if code != 0 || !strings.Contains(out, "Examples:") || !strings.Contains(out, strings.TrimSpace(desc)) {
				t.Errorf("%s -help: exit %d\n%s", c.CommandPath(), code, out)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
