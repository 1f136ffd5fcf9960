// Package docker is the task driver that runs a task's containers as
// Docker containers, through the Docker Engine API client
// (github.com/docker/docker/client). It implements driver.Driver; the agent
// drives it exactly as it drives the exec driver.
//
// # The engine
//
// The client negotiates its API version with the engine and uses nothing
// newer than API 1.41 (Docker Engine 20.10), the oldest engine the driver
// supports; Fingerprint reports an older engine as unavailable. The engine
// is found the way the docker CLI finds it (DOCKER_HOST and friends) unless
// Config.Host says otherwise.
//
// # Images
//
// Images must already be on the host. The driver never pulls: Start of an
// image the engine does not have fails with an error wrapping
// driver.ErrImageMissing that names the image, which is what the task
// reports as its stop reason.
//
// # Identity and adoption
//
// Every container carries these labels: trellis.task (Spec.TaskID),
// trellis.task_uid (Spec.TaskUID), trellis.container (Spec.Container),
// trellis.agent (Config.Agent, for people), trellis.cluster and
// trellis.agent_id (Config.Cluster and AgentID, which decide ownership:
// owner.go), and Config.Labels. Its name, trellis-<task>-<container>-<hash>,
// holds the task and container names (cleaned to what docker allows) and a
// hash of the exact task id, task uid and container name, so it is readable
// in `docker ps` and unique per task incarnation. Starting the same
// (task uid, container) again replaces an exited container of that name; it
// is refused while that container still runs, because then the agent should
// have recovered it rather than started a second copy.
//
// An agent that restarts re-attaches with Recover, given the Handle it
// stored (the container id). List finds every container labelled with this
// agent's cluster and identity, running or not, so that the agent can
// re-adopt the ones its state knows and Destroy the orphans it does not (a
// container whose task was removed while the agent was down, or one
// created by a Start whose result the agent never recorded). The identity
// must therefore be stable across restarts and distinct between agents
// that share an engine, whatever their names: two `trellis dev` each have
// a dev-1, and two clusters may share an instance name. RemoveMarked is
// trellis dev's sweep of its dead runs' containers, by their
// trellis.dev_run label.
//
// # What a container gets
//
//   - Command, when set, is the program and its arguments: it replaces the
//     image's entrypoint and cmd. An empty Command keeps both.
//   - Env and WorkingDir as given (the engine creates a missing working
//     directory).
//   - Ports: by default the container is on the engine's default bridge
//     network and each port is published on the same host port (TCP, all
//     host addresses), so that the agent's HTTP and TCP health checks and
//     other tasks reach it at the address they would reach an exec task.
//     The container can reach the host as host.docker.internal (the host
//     gateway), which is where a task finds the agent's local API if the
//     agent listens on that address. Config.Network = "host" runs containers
//     in the host's network namespace instead: nothing is published and
//     ports are bound by the program directly, as with exec.
//   - A container of a bridge task (Spec.NetnsHolder set) joins the task's
//     network namespace through its holder, NetworkMode
//     container:<holder>: Docker accepts no namespace path. Its ports are
//     then the task's, published by the agent's CNI plugins, not by the
//     engine. HoldNetns starts the holder (holder.go says what it is).
//   - MemoryBytes becomes the memory limit, with swap disabled (the memory
//     and memory+swap limits are equal) so that exceeding it is an OOM kill
//     rather than slow swapping; CPUMillis becomes NanoCPUs (a CFS quota).
//   - No restart policy in the engine: the agent owns restarts, and a
//     container the engine restarted behind its back would break Wait.
//   - The json-file log driver, rotated (3 files of 10 MB), so that
//     Logs can always read it back and a chatty task cannot fill the disk.
//
// # Exits
//
// Wait reports the engine's exit code. The engine reports a container
// killed by signal n as exit code 128+n; Wait decodes codes 129 to 159 into
// Exit.Signal (and keeps Code as reported), and sets OOMKilled from the
// container's state. The engine hears of an OOM kill and of the exit it
// causes separately, and under load the exit can come first; so when a
// memory-limited container died of SIGKILL and its state does not say OOM,
// Wait watches the engine's events for up to a second (oomGrace) for a late OOM report.
// (An OOM kill in the very first instants of a container can escape the
// engine altogether; OOMKilled is as good as the engine's report.)
//
// Wait returns an error only when its context ends; every other failure,
// including a container that has been removed (ErrGone), is an Exit with
// Code -1 and Err set, which the agent records as the stop reason.
//
// # Exec and logs
//
// Exec runs a command in the running container (command health checks),
// returning its exit code and combined stdout and stderr, of which only the
// first 64 KiB (maxExecOutput) are kept. When ctx ends Exec returns at once,
// but the engine has no call to kill an exec'd process: it runs on inside
// the container until it ends by itself or the container stops.
//
// Logs reads one stream back from the engine, demultiplexed. With follow it
// goes on until ctx ends or the container stops (the engine ends a follow at
// the container's exit); either way the reader then reports io.EOF.
package docker
