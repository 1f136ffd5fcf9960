package docker

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/testcluster/dockerhost"
)

// The engine tests run against the host's Docker engine with an image
// built here, FROM scratch, holding testdata/driverprobe: nothing is
// pulled. Without an engine they skip, unless TRELLIS_REQUIRE_DOCKER is set
// (CI sets it, so that a broken engine fails rather than passes silently).

var engine struct {
	once sync.Once
	// skip is why there is no engine to test against.
	skip string
	// err is why the test image could not be made.
	err         error
	image       string
	memoryLimit bool
}

// probeImage returns the test image, building it on first use, or skips
// the test when no engine is reachable.
func probeImage(t *testing.T) string {
	t.Helper()
	engine.once.Do(prepareEngine)
	if engine.skip != "" {
		if os.Getenv("TRELLIS_REQUIRE_DOCKER") != "" {
			t.Fatalf("TRELLIS_REQUIRE_DOCKER is set but %s", engine.skip)
		}
		t.Skip(engine.skip)
	}
	if engine.err != nil {
		t.Fatalf("building the test image: %v", engine.err)
	}
	return engine.image
}

func prepareEngine() {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		engine.skip = fmt.Sprintf("no Docker engine client (%v); the docker driver's engine tests need one", err)
		return
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		engine.skip = fmt.Sprintf("no Docker engine reachable at %s (%v); the docker driver's engine tests need one", cli.DaemonHost(), err)
		return
	}
	info, err := cli.Info(ctx)
	if err != nil {
		engine.err = fmt.Errorf("engine info: %w", err)
		return
	}
	engine.memoryLimit = info.MemoryLimit
	// The probe image is built as the multi-process tests build it, so the
	// two share one image (tagged by a hash of the program).
	host, err := dockerhost.Connect(ctx)
	if err != nil {
		engine.err = err
		return
	}
	defer host.Close()
	buildCtx, done := context.WithTimeout(context.Background(), 5*time.Minute)
	defer done()
	engine.image, engine.err = host.ProbeImage(buildCtx)
}

// randomHex is a short random name part, so that concurrent tests (and
// repeated runs) never share agents, uids or ports' containers.
func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// newTestDriver is a driver with an agent name of its own, whose
// containers are all removed when the test ends.
func newTestDriver(t *testing.T, cfg Config) *Driver {
	t.Helper()
	if cfg.Agent == "" {
		cfg.Agent = "test-" + randomHex(t)
	}
	d := New(cfg)
	t.Cleanup(func() { removeAgentContainers(t, Config{Agent: cfg.Agent, Cluster: cfg.Cluster, AgentID: cfg.AgentID}) })
	t.Cleanup(func() { d.Close() })
	return d
}

// removeAgentContainers removes whatever the agent's drivers created,
// through a driver of its own (the test's may be closed by then).
func removeAgentContainers(t *testing.T, cfg Config) {
	agent := cfg.Agent
	d := New(cfg)
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	found, err := d.List(ctx)
	if err != nil {
		t.Errorf("cleanup: list containers of agent %s: %v", agent, err)
		return
	}
	for _, a := range found {
		if err := d.Destroy(ctx, a.Handle); err != nil {
			t.Errorf("cleanup: remove container %s: %v", a.Name, err)
		}
	}
}

// testCtx is the test's context with a deadline, which every wait in the
// engine tests is bounded by.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// probeSpec is a spec running driverprobe with args (none: its default).
func probeSpec(t *testing.T, name string, args ...string) driver.Spec {
	s := driver.Spec{
		TaskID:    "tests/" + t.Name(),
		TaskUID:   randomHex(t),
		Container: name,
		Image:     probeImage(t),
	}
	if len(args) > 0 {
		s.Command = append([]string{"/driverprobe"}, args...)
	}
	return s
}

// start starts spec and fails the test if it cannot.
func start(t *testing.T, ctx context.Context, d *Driver, spec driver.Spec) driver.Handle {
	t.Helper()
	h, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return h
}

// wait waits for the container's exit and fails the test if it cannot.
func wait(t *testing.T, ctx context.Context, d *Driver, h driver.Handle) driver.Exit {
	t.Helper()
	exit, err := d.Wait(ctx, h)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if exit.Err != nil {
		t.Fatalf("Wait: exit error: %v", exit.Err)
	}
	return exit
}

// readLog reads a whole stream of an exited container's log.
func readLog(t *testing.T, ctx context.Context, d *Driver, h driver.Handle, stream driver.Stream) string {
	t.Helper()
	r, err := d.Logs(ctx, h, driver.Spec{}, stream, false)
	if err != nil {
		t.Fatalf("Logs(%s): %v", stream, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("Logs(%s): read: %v", stream, err)
	}
	return string(b)
}

// follow opens a following reader on a stream of a container's log.
func follow(t *testing.T, ctx context.Context, d *Driver, h driver.Handle, stream driver.Stream) *bufio.Reader {
	t.Helper()
	r, err := d.Logs(ctx, h, driver.Spec{}, stream, true)
	if err != nil {
		t.Fatalf("Logs(%s, follow): %v", stream, err)
	}
	t.Cleanup(func() { r.Close() })
	return bufio.NewReader(r)
}

// expectLine reads the next line of a followed log and checks it: the
// condition the engine tests wait on before they signal.
func expectLine(t *testing.T, r *bufio.Reader, want string) {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("waiting for log line %q: got %q, %v", want, line, err)
	}
	if got := strings.TrimSuffix(line, "\n"); got != want {
		t.Fatalf("log line: got %q, want %q", got, want)
	}
}

// startReady starts driverprobe's default behaviour and waits until it
// has installed its signal handlers.
func startReady(t *testing.T, ctx context.Context, d *Driver, spec driver.Spec) (driver.Handle, *bufio.Reader) {
	t.Helper()
	h := start(t, ctx, d, spec)
	stdout := follow(t, ctx, d, h, driver.Stdout)
	expectLine(t, stdout, "ready")
	return h, stdout
}

func isGoneErr(err error) bool { return errors.Is(err, driver.ErrGone) }
