package driver

import (
	"context"
	"errors"
	"io"
	"syscall"
	"time"
)

// Errors a driver returns, wrapped with detail.
var (
	// ErrGone: the container of a handle no longer exists (it exited while
	// the agent was away, or the pid now belongs to another process).
	ErrGone = errors.New("container is gone")
	// ErrUnavailable: the driver cannot run on this host (no Docker engine,
	// say). Fingerprint reports why.
	ErrUnavailable = errors.New("driver is unavailable")
	// ErrImageMissing: a docker image that is not on the host; nothing is
	// pulled.
	ErrImageMissing = errors.New("image is not on the host")
)

// Spec is one container to start, in plain values.
type Spec struct {
	// TaskID names the task ("namespace/name"), TaskUID its incarnation;
	// Container is the container's name in the task definition. Together
	// they identify the container for adoption after an agent restart.
	TaskID    string
	TaskUID   string
	Container string

	// Image is the docker image (name:tag); exec ignores it.
	Image string
	// Command is the program and its arguments. For docker an empty
	// Command keeps the image's entrypoint and cmd.
	Command    []string
	Env        map[string]string
	WorkingDir string
	// User and Group are the numeric uid and gid the container runs as;
	// 0 means the agent's own (exec) or the image's (docker). The mesh's
	// proxy runs as 1337:1337, which the redirect rules skip.
	User  uint32
	Group uint32
	// Ports the container listens on (host networking for exec; published
	// on the same host port for docker).
	Ports []int

	// CPUMillis (1000 = one core) and MemoryBytes limit the container; zero
	// means no limit.
	CPUMillis   int64
	MemoryBytes int64

	// LogDir is where stdout and stderr go: LogDir/<Container>.stdout and
	// .stderr, rotated by the driver (exec) or read from the engine
	// (docker).
	LogDir string
	// TaskDir is the task's private directory on the host, for scratch
	// files; exec uses it as the working directory when WorkingDir is
	// empty.
	TaskDir string

	// Netns is the path of the task's network namespace (network:
	// bridge), shared by all its containers; "" runs the container in the
	// network a driver gives by default. exec starts the process inside
	// it. docker cannot join a namespace by its path: its containers join
	// NetnsHolder, the container holding it (see NetnsHolder).
	Netns string
	// NetnsHolder is the id of the container that holds Netns, for the
	// driver that made it (NetnsHolder.HoldNetns): docker joins it as
	// container:<id>.
	NetnsHolder string
}

// Handle finds a started container again. The agent stores it with the
// task's local state so that a restarted agent can Recover it.
type Handle struct {
	Driver string `json:"driver"`
	// ID is the driver's name for the container: a pid for exec, a
	// container id for docker.
	ID string `json:"id"`
	// StartedAt is when the container started.
	StartedAt time.Time `json:"started_at"`
	// State is the driver's own detail (exec: the process start time in
	// clock ticks, so that a recycled pid is not mistaken for ours).
	State []byte `json:"state,omitempty"`
}

// Exit is how a container ended.
type Exit struct {
	// Code is the exit status; -1 when unknown (a process re-attached
	// after an agent restart can be seen to end, but not its status).
	Code int
	// Signal is the signal that killed it, 0 if none.
	Signal syscall.Signal
	// OOMKilled: the memory limit killed it.
	OOMKilled bool
	// Err is set when the container could not be waited on.
	Err error
}

// Stream selects a log stream.
type Stream string

const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

// Fingerprint says whether a driver can run here.
type Fingerprint struct {
	Available bool
	// Detail: a version when available, the reason when not.
	Detail string
}

// Driver runs containers. Implementations are safe for concurrent use.
type Driver interface {
	// Name is "exec", "docker" or "sim".
	Name() string
	// Fingerprint probes the host once; the agent advertises available
	// drivers as instance attributes.
	Fingerprint(ctx context.Context) Fingerprint
	// Start starts a container and returns once it has started (or
	// failed to: the error is what the task reports as its stop reason).
	Start(ctx context.Context, spec Spec) (Handle, error)
	// Wait blocks until the container exits, or ctx ends (then it returns
	// ctx's error and the container keeps running).
	Wait(ctx context.Context, h Handle) (Exit, error)
	// Signal sends sig to the container (exec: its whole process group).
	// Signalling a container that has exited is not an error.
	Signal(ctx context.Context, h Handle, sig syscall.Signal) error
	// Exec runs a command inside the container (for command health
	// checks) and returns its exit code and combined output, bounded.
	Exec(ctx context.Context, h Handle, cmd []string) (code int, output []byte, err error)
	// Recover re-attaches to a container after an agent restart. It
	// returns ErrGone when the container no longer runs.
	Recover(ctx context.Context, h Handle) error
	// Destroy releases what the container held once it has exited
	// (docker: removes the container; exec: its cgroup). Idempotent.
	Destroy(ctx context.Context, h Handle) error
	// Logs reads a log stream from the start of what is kept; with follow
	// it goes on until ctx ends.
	Logs(ctx context.Context, h Handle, spec Spec, stream Stream, follow bool) (io.ReadCloser, error)
}

// Inventory is implemented by drivers that can list the containers they
// hold for this agent (docker, by label). An agent lists them when it
// starts and removes those no task of its local state knows: what a lost
// data dir, or a crash in the middle of a start, left behind.
type Inventory interface {
	Inventory(ctx context.Context) ([]Owned, error)
}

// NetnsHolder is implemented by drivers whose containers can join only a
// network namespace that one of their own containers holds: Docker runs a
// container in another's namespace (container:<id>), never in one given
// by its path. For a bridge task with such containers the agent asks the
// driver for a holder, a container that holds a new namespace and does
// nothing else, makes that namespace the task's (the CNI plugins set it
// up), and passes the holder's id in Spec.NetnsHolder.
type NetnsHolder interface {
	// HoldNetns starts the holder of task taskUID's namespace and returns
	// its handle and its pid: /proc/<pid>/ns/net is the namespace. A
	// holder of the same task already running is returned as it is.
	HoldNetns(ctx context.Context, taskID, taskUID string) (Handle, int, error)
	// ReleaseNetns removes the holder (the namespace lives on while the
	// agent holds it). Idempotent.
	ReleaseNetns(ctx context.Context, h Handle) error
}

// Owned is a container a driver holds for the agent.
type Owned struct {
	Handle Handle
	// TaskUID and Container name the task incarnation and container it
	// was started for.
	TaskUID   string
	Container string
}
