//go:build linux

package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"trellis.dev/trellis/internal/markdown"
	"trellis.dev/trellis/internal/testcluster"
)

// tryIt is what a "Try it" section of docs/ needs beyond trellis and
// bash, and how to remove what it leaves on the machine. Every such
// section must be declared here, so that a new one is run too.
type tryIt struct {
	root   bool     // it runs as root
	cni    bool     // bridge tasks: root and the CNI plugins (TRELLIS_REQUIRE_CNI)
	docker bool     // a Docker engine (TRELLIS_REQUIRE_DOCKER)
	tools  []string // commands it calls besides trellis
	// cleanup runs before the section (what an earlier run left) and
	// after it, whatever happened.
	cleanup string
}

var tryIts = map[string]tryIt{
	"orchestrator.md: Try it on one machine": {},
	"ca.md: Try it":                          {tools: []string{"openssl", "jq", "curl", "grpcurl"}},
	"intentions.md: Try it":                  {tools: []string{"cat"}},
	"dns.md: Try it: a bridge task resolves through its agent": {cni: true, tools: []string{"dig", "cut", "grep", "diff", "timeout", "cat"},
		cleanup: "rm -f /tmp/dnsdemo-api.yaml /tmp/dnsdemo-client.yaml /tmp/dnsdemo-api.txt /tmp/dnsdemo-outside.txt"},
	"catalog.md: Try it": {tools: []string{"curl", "sed", "grep"}},
	"mesh.md: Try it": {cni: true, tools: []string{"python3", "curl", "cut", "grep", "tail", "timeout"},
		cleanup: "rm -f /tmp/meshdemo-counting.yaml /tmp/meshdemo-dashboard.yaml /tmp/meshdemo-codes.txt"},
	"catalog.md: Try it: a mesh task registers itself": {tools: []string{"cut", "tee", "grep", "tr"}},
	"catalog.md: Try it: a container's health becomes its check": {tools: []string{"cut", "tee", "grep", "touch", "rm", "sleep"},
		cleanup: "rm -f /tmp/hs-api-ready /tmp/hs-api.yaml /tmp/hs-run.txt"},
	"networking.md: Try it": {
		cni: true, docker: true, tools: []string{"go", "nsenter", "curl", "sed", "cut", "tee"},
		cleanup: "docker rmi -f netdemo:1 >/dev/null 2>&1; rm -rf /tmp/netdemo",
	},
	"dns.md: Try it": {tools: []string{"dig", "grep"}},
	"networking.md: Try it in two namespaces": {
		root: true, tools: []string{"ip", "iptables-save", "iptables-restore", "python3", "curl", "setpriv", "head"},
		cleanup: "ip netns del app 2>/dev/null; ip netns del peer 2>/dev/null; true",
	},
}

// TestDocsTryIt runs every "Try it" section of docs/ as a reader would:
// its sh blocks in order, in bash with errexit and pipefail, against a
// real trellis dev. A block that starts dev (`make dev ...`, `trellis dev
// ...`) is the reader's first terminal: the test starts the freshly built
// binary with those flags, on free ports and a bridge of its own, waits
// for its instances to be ready (as a reader switching terminals does),
// and points the rest at it: TRELLIS_ADDR for the CLI, and the defaults
// the docs name for curl, grpcurl and dig (localhost:7700, 127.0.0.1:7701,
// -p 8600) are replaced by its addresses, so that a dev a reader runs on this machine
// is never in the way. The other blocks are the
// second terminal: one shell, so that a variable set in one block is there
// in the next, run from a directory that stands for the repository's root
// (bin/trellis is the binary built here). One dev serves every section of
// a doc that asks for the same flags. A section whose needs are missing
// here is skipped saying which, unless CI's TRELLIS_REQUIRE_CNI or
// TRELLIS_REQUIRE_DOCKER ask for them.
func TestDocsTryIt(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	becomeSubreaper(t)
	bin := trellisBinary(t)
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	seen := map[string]bool{}
	for _, path := range docs {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(path)
		sections := markdown.Sections(string(text), func(title string) bool { return strings.HasPrefix(title, "Try it") })
		if len(sections) == 0 {
			continue
		}
		for _, sec := range sections {
			seen[name+": "+sec.Title] = true
		}
		t.Run(name, func(t *testing.T) {
			devs := map[string]*docDev{}
			for _, sec := range sections {
				key := name + ": " + sec.Title
				spec, ok := tryIts[key]
				if !ok {
					t.Errorf("docs/%s:%d: %q is not in tryIts: say there what it needs", name, sec.Line, sec.Title)
					continue
				}
				docT := t
				t.Run(sec.Title, func(t *testing.T) { runTryIt(t, docT, bin, name, sec, spec, devs) })
			}
		})
	}
	for key := range tryIts {
		if !seen[key] {
			t.Errorf("tryIts declares %q, which docs/ no longer has", key)
		}
	}
}

// runTryIt runs one section.
// docT is the doc's test, which the devs its sections share outlive.
func runTryIt(t *testing.T, docT *testing.T, bin, doc string, sec markdown.Section, spec tryIt, devs map[string]*docDev) {
	requireTryIt(t, spec)
	var devFlags []string
	isDev := false
	var script strings.Builder
	script.WriteString("set -x\n")
	for _, b := range markdown.Blocks(sec.Body) {
		if b.Lang != "sh" {
			continue
		}
		flags, ok, err := devCommand(b.Body)
		if err != nil {
			t.Fatalf("docs/%s:%d: %v", doc, sec.Line+b.Line, err)
		}
		if ok {
			if isDev {
				t.Fatalf("docs/%s:%d: a second dev in one section", doc, sec.Line+b.Line)
			}
			isDev, devFlags = true, flags
			continue
		}
		fmt.Fprintf(&script, "# docs/%s:%d\n%s", doc, sec.Line+b.Line, b.Body)
	}
	// A section without a dev talks to no server: not to a dev that
	// someone runs on this machine's default ports either.
	env := append(os.Environ(), "TRELLIS_ADDR=http://127.0.0.1:1")
	run := script.String()
	if isDev {
		key := strings.Join(devFlags, " ")
		d := devs[key]
		if d == nil {
			d = startDocDev(t, docT, bin, devFlags)
			devs[key] = d
		}
		env = append(env, "TRELLIS_ADDR="+d.addr)
		httpHost := strings.TrimPrefix(d.addr, "http://")
		run = strings.NewReplacer("localhost:7700", httpHost, "127.0.0.1:7700", httpHost,
			"localhost:7701", d.grpcAddr, "127.0.0.1:7701", d.grpcAddr, "-p 8600", "-p "+d.dnsPort).Replace(run)
	}
	if spec.cleanup != "" {
		runCleanup(t, spec.cleanup)
		t.Cleanup(func() { runCleanup(t, spec.cleanup) })
	}
	// The repository's root, as far as the docs use it: bin/trellis.
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(root, "bin", "trellis")); err != nil {
		t.Fatal(err)
	}
	env = append(env, "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
	out, err := runShell(t.Context(), root, env, run, 5*time.Minute)
	if testing.Verbose() && err == nil {
		t.Logf("docs/%s, %q:\n%s", doc, sec.Title, out)
	}
	if err != nil {
		t.Errorf("docs/%s, %q: %v\n%s", doc, sec.Title, err, tail([]byte(out), 8000))
		for _, d := range devs {
			if log, _ := os.ReadFile(d.logPath); len(log) > 0 {
				t.Logf("--- trellis dev %s log ---\n%s", d.addr, tail(log, 4000))
			}
		}
	}
}

// requireTryIt skips a section whose needs this machine lacks, saying
// which; CI asks for them all (TRELLIS_REQUIRE_CNI, TRELLIS_REQUIRE_DOCKER)
// and fails instead.
func requireTryIt(t *testing.T, spec tryIt) {
	t.Helper()
	ci := os.Getenv("TRELLIS_REQUIRE_CNI") != "" || os.Getenv("TRELLIS_REQUIRE_DOCKER") != ""
	missing := func(required bool, reason string) {
		if required {
			t.Fatalf("required here, but %s", reason)
		}
		t.Skip(reason)
	}
	if spec.cni {
		requireCNI(t)
	}
	if spec.root && os.Geteuid() != 0 {
		missing(os.Getenv("TRELLIS_REQUIRE_CNI") != "", "runs as root, and this is not root")
	}
	for _, tool := range spec.tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing(ci, fmt.Sprintf("needs %s, which is not on PATH (.ci/run installs what the sections call)", tool))
		}
	}
	if spec.docker {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "docker", "version").CombinedOutput(); err != nil {
			missing(os.Getenv("TRELLIS_REQUIRE_DOCKER") != "", fmt.Sprintf("needs a Docker engine: docker version: %v: %s", err, tail(out, 300)))
		}
	}
}

// devLine is a block that starts dev: make dev [DEV_FLAGS=...] or
// trellis dev [flags], and a comment.
var devLine = regexp.MustCompile(`^(make dev|trellis dev)\b([^#]*)(#.*)?$`)

// devCommand reads a block that starts dev: the flags dev is given (make
// dev's DEV_FLAGS, by default the Makefile's -instances 3). A block that
// starts dev holds nothing else: dev runs in a terminal of its own.
func devCommand(body string) (flags []string, ok bool, err error) {
	var lines []string
	for _, l := range strings.Split(body, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return nil, false, nil
	}
	m := devLine.FindStringSubmatch(lines[0])
	if m == nil {
		return nil, false, nil
	}
	if len(lines) > 1 {
		return nil, false, fmt.Errorf("a block that starts dev must hold only that command (dev keeps its terminal): it also has %q", lines[1])
	}
	args := strings.Fields(m[2])
	if m[1] == "trellis dev" {
		return args, true, nil
	}
	flags = []string{"-instances", "3"} // the Makefile's DEV_FLAGS
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "DEV_FLAGS="); ok {
			flags = append(strings.Fields(v), args[i+1:]...)
			break
		}
	}
	return flags, true, nil
}

// docDev is a trellis dev started for the docs.
type docDev struct {
	addr     string // the HTTP API's URL
	grpcAddr string // the gRPC API's host:port
	dnsPort  string // the DNS interface's port, on 127.0.0.1
	logPath  string
}

// startDocDev starts trellis dev with flags, on free ports and a bridge
// and subnet of its own, and waits until its banner is out and its
// instances are ready; it is stopped with SIGINT at the end of owner, the
// test of the doc whose sections share it (not t, the section that
// happens to start it: the next section would find it stopped).
func startDocDev(t *testing.T, owner testing.TB, bin string, flags []string) *docDev {
	t.Helper()
	n := 1
	for i, f := range flags {
		if strings.TrimLeft(f, "-") == "instances" && i+1 < len(flags) {
			n, _ = strconv.Atoi(flags[i+1])
		}
	}
	suffix := randomSuffix(t)
	bridge := "trdoc" + suffix[:6]
	// The banner does not name the DNS address: a port picked here.
	ports, err := testcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	dnsPort := strconv.Itoa(ports[0])
	args := append([]string{"dev", "-http-addr", "127.0.0.1:0", "-grpc-addr", "127.0.0.1:0", "-dns-addr", "127.0.0.1:" + dnsPort,
		"-bridge-name", bridge, "-bridge-subnet", fmt.Sprintf("10.252.%d.0/24", rand.IntN(256))}, flags...)
	logPath := filepath.Join(owner.TempDir(), "dev.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	owner.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(90 * time.Second):
			owner.Errorf("trellis dev did not stop within 90 s of SIGINT")
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		logFile.Close()
		if os.Geteuid() == 0 {
			_ = exec.Command("ip", "link", "del", bridge).Run()
		}
	})
	// The banner names the addresses: "  HTTP API:  http://..." and
	// "  gRPC API:  host:port".
	d := &docDev{logPath: logPath, dnsPort: dnsPort}
	banner := regexp.MustCompile(`(?m)^\s*HTTP API:\s+(http://\S+)\n\s*gRPC API:\s+(\S+)$`)
	err = testcluster.WaitFor(t.Context(), 2*time.Minute, func() bool {
		log, _ := os.ReadFile(logPath)
		if m := banner.FindSubmatch(log); m != nil {
			d.addr, d.grpcAddr = string(m[1]), string(m[2])
			return true
		}
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	if d.addr == "" {
		log, _ := os.ReadFile(logPath)
		t.Fatalf("trellis dev %s printed no banner (%v):\n%s", strings.Join(flags, " "), err, tail(log, 4000))
	}
	err = testcluster.WaitFor(t.Context(), time.Minute, func() bool {
		out, err := exec.Command(bin, "instance", "list", "-addr", d.addr).Output()
		return err == nil && strings.Count(string(out), " ready ") == n
	})
	if err != nil {
		out, _ := exec.Command(bin, "instance", "list", "-addr", d.addr).CombinedOutput()
		t.Fatalf("trellis dev's %d instances are not ready: %v\n%s", n, err, out)
	}
	return d
}

// runShell runs script in bash with errexit and pipefail, in its own
// process group, which is killed when it ends: what a block started in
// the background does not outlive it.
func runShell(ctx context.Context, dir string, env []string, script string, limit time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("not done within %s: %w", limit, err)
	}
	return out.String(), err
}

func runCleanup(t *testing.T, script string) {
	if out, err := runShell(context.Background(), os.TempDir(), os.Environ(), "set +e\n"+script, time.Minute); err != nil {
		t.Logf("cleanup: %v\n%s", err, out)
	}
}
