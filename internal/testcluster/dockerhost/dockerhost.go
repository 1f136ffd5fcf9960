// Package dockerhost is the host's Docker engine as the multi-process tests
// see it from outside: it builds the docker driver's test image, tells
// whether a container still runs, and removes what a test left. It is apart
// from testcluster so that users of that (the benchmarks) do not pull in
// the engine's client.
package dockerhost

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"
)

// Engine is a client of the host's Docker engine.
type Engine struct {
	cli *client.Client
}

// Connect returns the host's engine, or an error saying why none answers
// (the caller decides whether that skips or fails its test).
func Connect(ctx context.Context) (*Engine, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("no Docker engine client: %w", err)
	}
	if _, err := cli.Ping(ctx); err != nil {
		cli.Close()
		return nil, fmt.Errorf("no Docker engine reachable at %s: %w", cli.DaemonHost(), err)
	}
	return &Engine{cli: cli}, nil
}

// Close releases the client.
func (d *Engine) Close() error { return d.cli.Close() }

// ProbeRepo is the repository of the probe image: the docker driver's test
// program (internal/driver/docker/testdata/driverprobe) alone in a FROM
// scratch image, since nothing can be pulled. Run with no arguments it
// prints "ready" and runs until SIGTERM, on which it exits 3.
const ProbeRepo = "trellis-test/driverprobe"

// ProbeImage returns the probe image, building it unless the host already
// has an image of this exact program. It is built the way the docker
// driver's own tests build it (same flags, same tag: a hash of the
// program), so the two share one image.
func (d *Engine) ProbeImage(ctx context.Context) (string, error) {
	v, err := d.cli.ServerVersion(ctx)
	if err != nil {
		return "", fmt.Errorf("engine version: %w", err)
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "driverprobe")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "driverprobe")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./internal/driver/docker/testdata/driverprobe")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+v.Os, "GOARCH="+v.Arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build driverprobe: %v\n%s", err, out)
	}
	program, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(program)
	tag := ProbeRepo + ":" + hex.EncodeToString(sum[:6])
	if _, err := d.cli.ImageInspect(ctx, tag); err == nil {
		return tag, nil
	}

	var buildCtx bytes.Buffer
	tw := tar.NewWriter(&buildCtx)
	dockerfile := "FROM scratch\nCOPY driverprobe /driverprobe\nENTRYPOINT [\"/driverprobe\"]\nCMD [\"run\"]\n"
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{"Dockerfile", 0o644, []byte(dockerfile)}, {"driverprobe", 0o755, program}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data))}); err != nil {
			return "", err
		}
		if _, err := tw.Write(f.data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	resp, err := d.cli.ImageBuild(ctx, &buildCtx, build.ImageBuildOptions{
		Tags:        []string{tag},
		Remove:      true,
		ForceRemove: true,
		Version:     build.BuilderV1,
		Labels:      map[string]string{"trellis.test": "driverprobe"},
	})
	if err != nil {
		return "", fmt.Errorf("image build: %w", err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return "", fmt.Errorf("image build output: %w", err)
		}
		if m.Error != nil {
			return "", fmt.Errorf("image build: %s", m.Error.Message)
		}
	}
	if _, err := d.cli.ImageInspect(ctx, tag); err != nil {
		return "", fmt.Errorf("image build finished but %s is not there: %w", tag, err)
	}
	return tag, nil
}

// moduleRoot is the directory of the trellis module the test runs in.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the trellis module: go env GOMOD is empty")
	}
	return filepath.Dir(mod), nil
}

// Containers lists the IDs of the containers, running or not, that carry
// label (key=value), e.g. "trellis.agent=node-1".
func (d *Engine) Containers(ctx context.Context, label string) ([]string, error) {
	found, err := d.cli.ContainerList(ctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", label)),
	})
	if err != nil {
		return nil, fmt.Errorf("list containers labelled %s: %w", label, err)
	}
	ids := make([]string, len(found))
	for i, c := range found {
		ids[i] = c.ID
	}
	return ids, nil
}

// Running reports whether the container runs; a container that is gone
// does not.
func (d *Engine) Running(ctx context.Context, id string) (bool, error) {
	info, err := d.cli.ContainerInspect(ctx, id)
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("inspect container %s: %w", id, err)
	}
	return info.State != nil && info.State.Running, nil
}

// Remove removes containers, running or not.
func (d *Engine) Remove(ctx context.Context, ids ...string) error {
	var errs []error
	for _, id := range ids {
		err := d.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove container %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}
