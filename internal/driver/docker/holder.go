package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"trellis.dev/trellis/internal/driver"
)

// The holder of a bridge task's network namespace.
//
// Docker runs a container in another container's network namespace
// (NetworkMode container:<id>), never in one named by a path, so a bridge
// task with docker containers gets its namespace from a container of its
// own: the holder, which does nothing but exist. Its namespace is made by
// the engine ("none": loopback only), then bind-mounted and set up by the
// agent's CNI plugins like any task's; the task's docker containers join
// the holder, its exec containers the bind mount. The holder is labelled
// like the task's containers, with an empty trellis.container, so that a
// restarted agent keeps it for a task it resumes and removes it
// otherwise.
//
// The holder's image is made here, not pulled: a scratch image with one
// file, /pause, a static program of a few instructions that waits for a
// signal forever (pause(2) on amd64, ppoll(2) on arm64, which has no
// pause). As the container's init, it ignores SIGTERM; SIGKILL, which
// ReleaseNetns's removal sends, ends it.

// PauseImage is the holder's image, imported into the engine on first use.
const PauseImage = "trellis/pause:1"

// holderName is the docker name of task uid's holder.
func holderName(taskID, taskUID string) string {
	sum := sha256.Sum256([]byte(taskID + "\x00" + taskUID + "\x00netns"))
	return "trellis-" + cleanName(taskID) + "-netns-" + hex.EncodeToString(sum[:5])
}

// pauseProgram is the code of /pause for an architecture; nil where the
// holder is not available.
func pauseProgram(arch string) (machine uint16, code []byte) {
	switch arch {
	case "amd64":
		return 0x3e, []byte{
			0xb8, 0x22, 0x00, 0x00, 0x00, // mov eax, 34 (pause)
			0x0f, 0x05, // syscall
			0xeb, 0xf7, // jmp back to the mov
		}
	case "arm64":
		var b []byte
		for _, ins := range []uint32{
			0xd2800000, // mov x0, #0 (no fds)
			0xd2800001, // mov x1, #0 (nfds)
			0xd2800002, // mov x2, #0 (no timeout)
			0xd2800003, // mov x3, #0 (no sigmask)
			0xd2800928, // mov x8, #73 (ppoll)
			0xd4000001, // svc #0
			0x17fffffa, // b back to the first mov
		} {
			b = binary.LittleEndian.AppendUint32(b, ins)
		}
		return 0xb7, b
	}
	return 0, nil
}

// pauseELF is /pause: a static ELF64 executable of one loadable segment,
// its header, program header and code, loaded at 0x400000.
func pauseELF(arch string) ([]byte, error) {
	machine, code := pauseProgram(arch)
	if code == nil {
		return nil, fmt.Errorf("docker: no network namespace holder for %s (amd64 and arm64 have one): docker containers cannot run in bridge tasks here", arch)
	}
	const (
		base     = 0x400000
		ehsize   = 64
		phsize   = 56
		codeAddr = base + ehsize + phsize
	)
	size := uint64(ehsize + phsize + len(code))
	le := binary.LittleEndian
	b := make([]byte, 0, size)
	b = append(b, 0x7f, 'E', 'L', 'F', 2 /* 64-bit */, 1 /* little-endian */, 1 /* version */, 0 /* System V */)
	b = append(b, make([]byte, 8)...)
	b = le.AppendUint16(b, 2) // ET_EXEC
	b = le.AppendUint16(b, machine)
	b = le.AppendUint32(b, 1)        // version
	b = le.AppendUint64(b, codeAddr) // entry
	b = le.AppendUint64(b, ehsize)   // program headers' offset
	b = le.AppendUint64(b, 0)        // no section headers
	b = le.AppendUint32(b, 0)        // flags
	b = le.AppendUint16(b, ehsize)
	b = le.AppendUint16(b, phsize)
	b = le.AppendUint16(b, 1) // one program header
	b = le.AppendUint16(b, 64)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint16(b, 0)
	// The program header: everything, loaded read and execute.
	b = le.AppendUint32(b, 1) // PT_LOAD
	b = le.AppendUint32(b, 5) // PF_R|PF_X
	b = le.AppendUint64(b, 0) // from the file's start
	b = le.AppendUint64(b, base)
	b = le.AppendUint64(b, base)
	b = le.AppendUint64(b, size)
	b = le.AppendUint64(b, size)
	b = le.AppendUint64(b, 0x1000)
	return append(b, code...), nil
}

// pauseRootfs is the holder image's filesystem, a tar of /pause.
func pauseRootfs(arch string) ([]byte, error) {
	elf, err := pauseELF(arch)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	// A fixed time: the same bytes, so the same image, on every host.
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o555, Size: int64(len(elf)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(elf); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// pauseMu serializes the import of the holder image.
var pauseMu sync.Mutex

// ensurePauseImage imports the holder's image unless the engine has it.
func (d *Driver) ensurePauseImage(ctx context.Context) error {
	cli, err := d.client()
	if err != nil {
		return err
	}
	pauseMu.Lock()
	defer pauseMu.Unlock()
	if _, err := cli.ImageInspect(ctx, PauseImage); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) {
		return engineErr("inspect image "+PauseImage, err)
	}
	rootfs, err := pauseRootfs(runtime.GOARCH)
	if err != nil {
		return err
	}
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: bytes.NewReader(rootfs), SourceName: "-"}, PauseImage,
		image.ImportOptions{Changes: []string{`ENTRYPOINT ["/pause"]`}, Message: "trellis: holds a bridge task's network namespace"})
	if err != nil {
		return engineErr("import image "+PauseImage, err)
	}
	defer rc.Close()
	// The engine reports the import's progress, and its failure, in the
	// stream.
	if err := drainJSONStream(rc); err != nil {
		return fmt.Errorf("docker: import image %s: %w", PauseImage, err)
	}
	d.log.Info("imported the image of network namespace holders", "image", PauseImage)
	return nil
}

// HoldNetns implements driver.NetnsHolder: it starts the holder of the
// task's network namespace (importing its image first if needed) and
// returns its handle and pid. A running holder of the same task is
// returned as it is.
func (d *Driver) HoldNetns(ctx context.Context, taskID, taskUID string) (driver.Handle, int, error) {
	cli, err := d.client()
	if err != nil {
		return driver.Handle{}, 0, err
	}
	if taskID == "" || taskUID == "" {
		return driver.Handle{}, 0, fmt.Errorf("docker: hold netns: task id %q and uid %q are both needed", taskID, taskUID)
	}
	if err := d.ensurePauseImage(ctx); err != nil {
		return driver.Handle{}, 0, err
	}
	name := holderName(taskID, taskUID)
	if info, err := cli.ContainerInspect(ctx, name); err == nil {
		l := map[string]string{}
		if info.Config != nil {
			l = info.Config.Labels
		}
		switch {
		case l[LabelTaskUID] != taskUID || !(d.owner.owns(l) || d.owner.ownedBefore(l)):
			return driver.Handle{}, 0, fmt.Errorf("docker: container name %s is taken by container %s, which is not this task's", name, shortID(info.ID))
		case info.State != nil && info.State.Running && info.State.Pid > 0:
			return driver.Handle{Driver: d.Name(), ID: info.ID}, info.State.Pid, nil
		}
		// Exited: its namespace is gone with it; start a new one.
		if err := cli.ContainerRemove(ctx, info.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return driver.Handle{}, 0, engineErr("remove exited holder "+name, err)
		}
	} else if !cerrdefs.IsNotFound(err) {
		return driver.Handle{}, 0, engineErr("inspect container "+name, err)
	}
	cfg := &container.Config{
		Image:  PauseImage,
		Labels: labels(driver.Spec{TaskID: taskID, TaskUID: taskUID}, d.owner),
	}
	host := &container.HostConfig{
		NetworkMode:   "none",
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		LogConfig:     container.LogConfig{Type: "none"},
		// It needs no privilege at all.
		CapDrop:        []string{"ALL"},
		ReadonlyRootfs: true,
		Resources:      container.Resources{Memory: minMemoryBytes, MemorySwap: minMemoryBytes},
	}
	created, err := cli.ContainerCreate(ctx, cfg, host, nil, nil, name)
	if err != nil {
		return driver.Handle{}, 0, engineErr("create holder "+name, err)
	}
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		d.discard(ctx, cli, created.ID, name)
		return driver.Handle{}, 0, engineErr("start holder "+name, err)
	}
	info, err := cli.ContainerInspect(ctx, created.ID)
	if err != nil || info.State == nil || !info.State.Running || info.State.Pid <= 0 {
		d.discard(ctx, cli, created.ID, name)
		if err == nil {
			err = fmt.Errorf("it is not running (%+v)", info.State)
		}
		return driver.Handle{}, 0, engineErr("inspect holder "+name, err)
	}
	h := driver.Handle{Driver: d.Name(), ID: created.ID}
	if t, err := time.Parse(time.RFC3339Nano, info.State.StartedAt); err == nil {
		h.StartedAt = t
	}
	d.log.Debug("holding a task's network namespace", "task", taskID, "holder", shortID(created.ID), "pid", info.State.Pid)
	return h, info.State.Pid, nil
}

// ReleaseNetns implements driver.NetnsHolder: it removes the holder.
func (d *Driver) ReleaseNetns(ctx context.Context, h driver.Handle) error {
	return d.Destroy(ctx, h)
}

var _ driver.NetnsHolder = (*Driver)(nil)

// drainJSONStream reads an engine progress stream (one JSON object after
// another) to its end, returning the error one of them reports.
func drainJSONStream(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
}
