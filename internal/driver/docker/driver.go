package docker

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/docker/docker/api/types/versions"
	"github.com/docker/docker/client"

	"trellis.dev/trellis/internal/driver"
)

// minAPIVersion is the oldest engine API the driver uses features of
// (Docker Engine 20.10: the host-gateway alias, and everything older).
const minAPIVersion = "1.41"

// Config configures a Driver.
type Config struct {
	// Logger receives the driver's own log lines; nil discards them.
	Logger *slog.Logger
	// Agent is the agent's name, put in the trellis.agent label of every
	// container for whoever reads `docker ps`. Empty means the host name.
	Agent string
	// Cluster and AgentID go in the trellis.cluster and trellis.agent_id
	// labels of every container, and List finds this agent's containers
	// by both (owner.go says why): AgentID must be stable across the
	// agent's restarts (so that it adopts its containers) and distinct
	// between agents sharing an engine, whatever their names. Empty
	// Cluster is "default", empty AgentID the agent's name.
	Cluster string
	AgentID string
	// Labels are put on every container too (trellis dev marks its
	// in-memory run's containers so that a later dev removes them).
	Labels map[string]string
	// Host is the engine's address ("unix:///var/run/docker.sock",
	// "tcp://..."); empty means the environment's (DOCKER_HOST, else the
	// default socket).
	Host string
	// Network is the network containers join: empty for the engine's
	// default bridge (ports published on the same host port), "host" for
	// the host's network namespace, or the name of a user-defined network
	// (ports published as for the bridge).
	Network string
	// ClientOptions are applied after the driver's own (environment,
	// Host, API version negotiation), for TLS and the like.
	ClientOptions []client.Opt
}

// Driver is the docker task driver. It is safe for concurrent use.
type Driver struct {
	log     *slog.Logger
	agent   string
	owner   owner
	network string
	cli     *client.Client
	// cliErr is why cli could not be made; every call then fails with
	// driver.ErrUnavailable.
	cliErr error
}

var _ driver.Driver = (*Driver)(nil)

// New returns a docker driver. It does not contact the engine: Fingerprint
// does, and a driver whose engine cannot be reached fails each call with
// driver.ErrUnavailable.
func New(cfg Config) *Driver {
	d := &Driver{log: cfg.Logger, agent: cfg.Agent, network: cfg.Network}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	d.log = d.log.With("driver", "docker")
	if d.agent == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "local"
		}
		d.agent = host
	}
	d.owner = ownerOf(cfg, d.agent)
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if cfg.Host != "" {
		opts = append(opts, client.WithHost(cfg.Host))
	}
	opts = append(opts, cfg.ClientOptions...)
	d.cli, d.cliErr = client.NewClientWithOpts(opts...)
	return d
}

// Name is "docker".
func (d *Driver) Name() string { return "docker" }

// Agent is the agent name in the labels of this driver's containers.
func (d *Driver) Agent() string { return d.agent }

// Close releases the client's connections to the engine. Containers are
// not touched.
func (d *Driver) Close() error {
	if d.cli == nil {
		return nil
	}
	return d.cli.Close()
}

// client is the engine client, or why there is none.
func (d *Driver) client() (*client.Client, error) {
	if d.cliErr != nil {
		return nil, fmt.Errorf("docker: %w: %w", driver.ErrUnavailable, d.cliErr)
	}
	return d.cli, nil
}

// Fingerprint pings the engine. Detail is the engine's version and API
// version, or why the driver cannot run.
func (d *Driver) Fingerprint(ctx context.Context) driver.Fingerprint {
	cli, err := d.client()
	if err != nil {
		return driver.Fingerprint{Detail: err.Error()}
	}
	if _, err := cli.Ping(ctx); err != nil {
		return driver.Fingerprint{Detail: fmt.Sprintf("cannot reach the Docker engine at %s: %v", cli.DaemonHost(), err)}
	}
	v, err := cli.ServerVersion(ctx)
	if err != nil {
		return driver.Fingerprint{Detail: fmt.Sprintf("the Docker engine at %s did not say its version: %v", cli.DaemonHost(), err)}
	}
	return fingerprintOf(v.Version, v.APIVersion)
}

// fingerprintOf decides availability from the engine's versions.
func fingerprintOf(engine, api string) driver.Fingerprint {
	if api == "" || versions.LessThan(api, minAPIVersion) {
		return driver.Fingerprint{Detail: fmt.Sprintf("Docker Engine %s speaks API %s; the driver needs API %s (Engine 20.10) or newer", engine, api, minAPIVersion)}
	}
	return driver.Fingerprint{Available: true, Detail: fmt.Sprintf("Docker Engine %s (API %s)", engine, api)}
}
