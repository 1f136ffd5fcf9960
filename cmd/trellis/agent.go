package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/agent"
	"trellis.dev/trellis/internal/agent/taskrunner"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/devrun"
	"trellis.dev/trellis/internal/dns"
	"trellis.dev/trellis/internal/driver"
	dockerdriver "trellis.dev/trellis/internal/driver/docker"
	execdriver "trellis.dev/trellis/internal/driver/exec"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/tlsutil"
)

// agentDrivers are the task drivers of the agent cfg configures: exec, and
// docker through the host's engine. Docker containers share the host's
// network, as exec processes do, so their ports are host ports and they
// reach the agent's metadata endpoint (TRELLIS_TASK_METADATA_URI) on
// loopback. They are labelled with the agent's cluster and identity (kept
// in its data dir), so that agents of the same name on one engine never
// take each other's. run, for trellis dev in memory, ties the tasks to
// this process: exec processes die with it, and everything is marked with
// the run for the next dev's sweep.
// A driver the host cannot run is still listed; the agent advertises it as
// unavailable.
func agentDrivers(cfg agent.Config, run *devrun.Run) (map[string]driver.Driver, error) {
	id, err := agent.Identity(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	execCfg := execdriver.Config{Logger: cfg.Logger}
	dockerCfg := dockerdriver.Config{Logger: cfg.Logger, Agent: cfg.Name, Cluster: cfg.Cluster, AgentID: id, Network: "host"}
	if run != nil {
		execCfg.DieWithAgent, execCfg.CgroupParent, execCfg.GroupLog = true, run.CgroupParent(), run.GroupLog()
		dockerCfg.Labels = run.Labels()
	}
	return map[string]driver.Driver{
		execdriver.Name:           execdriver.New(execCfg),
		orchestrator.DriverDocker: dockerdriver.New(dockerCfg),
	}, nil
}

func newAgentCmd(e *cli.Env) *cobra.Command {
	var (
		servers    []string
		attributes []string
		cfg        agent.Config
		logLevel   string
		tlsFiles   tlsutil.Config
		netFlags   networkFlags
		controlTLS tlsutil.Config
		dnsAddr    string
		recursors  []string
	)
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the agent of an instance: register it, heartbeat, run the tasks placed on it",
		Long: `Run the agent of this machine (an instance). It registers an Instance resource
named -name with built-in attributes (os, arch, hostname, cpu.count,
memory.bytes, kernel, driver.<name>) and those of -attribute, heartbeats to the
servers, learns the tasks placed on it by watching them, runs them through its
drivers and reports what happens to them.

It talks to one server at a time over gRPC and moves to another of -server when
that one goes away. Attributes an operator set with 'trellis instance
set-attribute', and a drain, are kept across restarts; -attribute values win
over stored ones of the same key.

Its state lives in -data-dir: an agent killed and started again on the same
directory re-attaches to the tasks it was running instead of starting them
again. Stopping the agent (Ctrl-C, SIGTERM) leaves its tasks running; 'trellis
agent leave' stops them and takes the instance out of the cluster.

Tasks reach the agent at TRELLIS_TASK_METADATA_URI (-http-addr) for their own
metadata, and for nothing else. The agent's control API (leave, logs, self,
leaves) is a Unix socket, -control-socket (default <data-dir>/agent.sock),
mode 0600: only the user the agent runs as reaches it ('trellis agent leave').
'trellis task logs' reads logs through the servers, which ask the agent over
the link it keeps with them; -control-addr serves the control API on TCP too,
for remote operators, with mutual TLS only.

A task with network: bridge gets a network namespace of its own, shared by its
containers, with an address on the host bridge -bridge-name (subnet
-bridge-subnet), outbound NAT and its ports published on the host, through the
CNI plugins (apt-get install containernetworking-plugins; the agent must run as
root). Without them the instance runs host tasks only, its network.bridge
attribute is false, and a bridge task placed on it stops saying why (see
docs/networking.md).

The agent answers DNS on -dns-addr (default 127.0.0.1:8600, UDP and TCP):
<service>.service.<namespace>.trellis. with the addresses (A, AAAA) and ports
(SRV) of the service's passing instances, <tag>.<service>.service... for those
with a tag, <instance>.instance.trellis. for an instance's address. It answers
from the catalog as the agent's own cache holds it, never asking a server (see
docs/dns.md); -dns-addr "" turns it off. It also serves every task with network:
bridge in the task's own namespace: the task's DNS queries, to whatever
resolver, reach the agent, which answers the trellis. names and forwards every
other name to -dns-recursor (default: the nameservers of the host's
/etc/resolv.conf).

The agent keeps a leaf cache of Connect CA certificates: its own agent leaf
(spiffe://<trust-domain>/agent/client/dc/<dc>/id/<name>) and one per service
of the tasks it runs (named by the task definition's family for now). Keys are
made on this machine; the servers sign. Each leaf is renewed at a random point
between 60 % and 90 % of its life, and re-signed within -ca-resign-window after
the CA's root changes. GET /v1/agent/leaves on the control socket lists them
(never a key).

With -auto-encrypt and -tls-ca-file alone (the cluster CA that signed the
servers' certificates), the agent gets its leaf over TLS that checks the
servers, then talks to them over mutual TLS presenting it: the CA file is all
an operator hands out for a first join (see docs/tls.md).`,
		Example: `  trellis agent -server 127.0.0.1:7701 -data-dir /var/lib/trellis/agent -name web-1 \
      -attribute zone=eu-1a -attribute node.class=big
  trellis agent -server 10.0.0.1:7701 -server 10.0.0.2:7701 -server 10.0.0.3:7701 \
      -data-dir /var/lib/trellis/agent -cluster prod
  trellis agent -server 10.0.0.1:7701 -data-dir /var/lib/trellis/agent \
      -tls-ca-file trellis-agent-ca.pem -auto-encrypt
  trellis agent -server 10.0.0.1:7701 -data-dir /var/lib/trellis/agent \
      -bridge-subnet 10.77.0.0/22`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := (&serverFlags{logLevel: logLevel}).logger(e.Stderr)
			if err != nil {
				return err
			}
			// Agents spread over the servers: each starts at a random one of
			// the list and goes round it from there.
			cfg.Servers = agent.RotateServers(servers, rand.IntN(max(len(servers), 1)))
			if cfg.Attributes, err = parseAttributes(attributes); err != nil {
				return cli.Usage(err)
			}
			if cfg.Name == "" {
				host, _ := os.Hostname()
				if cfg.Name = defaultInstanceName(host); cfg.Name == "" {
					return cli.Usage(errors.New("-name: required (the host name cannot serve as one)"))
				}
			}
			cfg.Token = e.Token()
			cfg.Logger = log
			tlsFiles.Datacenter = cfg.Datacenter
			if tlsFiles.Enabled() {
				tc, err := tlsutil.New(tlsFiles)
				if err != nil {
					return cli.Usage(err)
				}
				cfg.TLS = tc.OutgoingClientConfig()
				go tlsutil.WatchSIGHUP(cmd.Context(), tc, log.With("component", "tls"))
			}
			if cfg.ControlAddr != "" {
				if cfg.ControlTLS, err = controlTLSConfig(controlTLS, tlsFiles.CAFile, cfg.Datacenter); err != nil {
					return cli.Usage(err)
				}
			}
			if cfg.Network, err = netFlags.config(); err != nil {
				return cli.Usage(err)
			}
			if err := cfg.Validate(); err != nil {
				return cli.Usage(err)
			}
			if dnsAddr != "" {
				if err := dns.CheckAddr("-dns-addr", dnsAddr); err != nil {
					return cli.Usage(err)
				}
				comp := dns.NewAgentComponent(dnsAddr, 0)
				if len(recursors) > 0 {
					var rs []netip.AddrPort
					for _, r := range recursors {
						ap, err := dns.ParseRecursor("-dns-recursor", r)
						if err != nil {
							return cli.Usage(err)
						}
						rs = append(rs, ap)
					}
					comp.WithRecursors(rs)
				}
				cfg.Components = append(agent.DefaultComponents(), comp.Make)
			} else if len(recursors) > 0 {
				return cli.Usage(fmt.Errorf("-dns-recursor: needs the agent's DNS, which -dns-addr \"\" turns off"))
			}
			if cfg.Drivers, err = agentDrivers(cfg, nil); err != nil {
				return err
			}
			// Mesh tasks get the sidecar proxy: this binary's trellis proxy.
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("the agent's own executable, which mesh tasks' proxies run: %w", err)
			}
			cfg.NewRunner = taskrunner.WithProxy(exe, cfg.DataDir)
			a, err := agent.New(cfg)
			if err != nil {
				return err
			}
			ctx, stop := cli.SignalContext(cmd.Context())
			defer stop()
			go func() {
				<-ctx.Done()
				stop() // the next signal ends the process at once
			}()
			log.Info("trellis agent running", "name", cfg.Name, "metadata", "http://"+a.HTTPAddr(), "control", a.ControlSocket(), "address", a.Address())
			return a.Start(ctx)
		},
	}
	fs := cmd.Flags()
	fs.StringArrayVar(&servers, "server", nil, "gRPC address (host:port) of a server; repeatable (required). The agent starts at a random one and moves round the list when one goes away")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "directory for the agent's state, its tasks' directories and logs (required)")
	fs.StringVar(&cfg.Name, "name", "", "name of this instance (a DNS label; default: the host name)")
	fs.StringVar(&cfg.Cluster, "cluster", "default", "cluster the instance belongs to")
	fs.StringArrayVar(&attributes, "attribute", nil, "an attribute of this instance, key=value; repeatable")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", agent.DefaultHTTPAddr, "address of the tasks' metadata endpoint (TRELLIS_TASK_METADATA_URI), which serves each task its own metadata and nothing else (host:port; port 0 picks one and keeps it across restarts)")
	fs.StringVar(&cfg.AdvertiseAddr, "advertise-addr", "", "address written to the Instance (default: -http-addr's)")
	fs.StringVar(&cfg.ControlSocket, "control-socket", "", "path of the control API's Unix socket (leave, logs, self), mode 0600: only the agent's user reaches it (default: <data-dir>/agent.sock)")
	fs.StringVar(&cfg.ControlAddr, "control-addr", "", "also serve the control API on this TCP address (host:port), for operators on other machines: only with mutual TLS (-control-tls-cert-file, -control-tls-key-file, -tls-ca-file)")
	fs.StringVar(&controlTLS.CertFile, "control-tls-cert-file", "", "the certificate -control-addr serves (PEM): a control certificate of the cluster CA ('trellis tls cert create -control')")
	fs.StringVar(&controlTLS.KeyFile, "control-tls-key-file", "", "the private key of -control-tls-cert-file (PEM)")
	fs.StringVar(&tlsFiles.CAFile, "tls-ca-file", "", "the cluster CA's certificate (PEM): dial the servers over TLS and accept only servers of that CA (for servers started with -tls-* files)")
	fs.StringVar(&tlsFiles.CertFile, "tls-cert-file", "", "a client certificate of the cluster CA to present (optional; PEM); reloaded on SIGHUP")
	fs.StringVar(&tlsFiles.KeyFile, "tls-key-file", "", "the private key of -tls-cert-file (PEM)")
	fs.StringVar(&cfg.Datacenter, "datacenter", "dc1", "the servers' datacenter: the name their server certificates carry (server.<dc>.trellis) and the one the agent's Connect CA leaves name")
	fs.BoolVar(&cfg.AutoEncrypt, "auto-encrypt", false, "get the agent's leaf from the servers' Connect CA (over TLS checked with -tls-ca-file, which is all the agent needs) and present it to the servers: mutual TLS with no certificate file to hand out")
	fs.DurationVar(&cfg.ResignWindow, "ca-resign-window", 30*time.Second, "after the Connect CA's active root changes, re-sign the leaves at a random moment within this window, so a fleet does not sign at once")
	fs.StringVar(&dnsAddr, "dns-addr", dns.DefaultAddr, "address of the DNS interface, UDP and TCP (host:port), which answers <service>.service.<namespace>.trellis. (A, AAAA, SRV) with the passing instances of the catalog, from the agent's own cache, without asking a server (see docs/dns.md); empty serves none")
	fs.StringArrayVar(&recursors, "dns-recursor", nil, "a DNS server (IP or IP:port) that names outside trellis. are forwarded to, from the namespaces of bridge tasks; repeatable, asked in order (default: the nameservers of the host's /etc/resolv.conf)")
	netFlags.register(fs)
	addLogLevelFlag(fs, &logLevel, "info")
	e.ClientFlags.RegisterToken(fs)
	cmd.AddCommand(newAgentLeaveCmd(e))
	return cmd
}

func newAgentLeaveCmd(e *cli.Env) *cobra.Command {
	var socket, dataDir, controlAddr string
	var tlsFiles tlsutil.Config
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "leave",
		Short: "Make an agent leave the cluster: stop its tasks and mark its instance left",
		Long: `Ask a running agent to leave the cluster gracefully: it stops every task it runs
(each within its stop timeout), waits until their STOPPED states are stored,
marks its Instance left and exits. The command returns when that is done.

It talks to the agent's control socket, which only the user the agent runs as
can reach (mode 0600): run it on the instance, as that user. Name the socket
with -socket (or TRELLIS_AGENT_SOCKET), or the agent's -data-dir, where the
socket is (agent.sock); by default ` + defaultAgentSocket + `, the socket of
an agent started with -data-dir /var/lib/trellis/agent. 'trellis dev' prints
its agents' sockets.

From another machine, -control-addr reaches an agent started with
-control-addr, over mutual TLS: -tls-ca-file checks the agent's control
certificate, -tls-cert-file and -tls-key-file are a client certificate of the
cluster CA ('trellis tls cert create -client').`,
		Example: `  trellis agent leave
  trellis agent leave -data-dir /var/lib/trellis/agent
  TRELLIS_AGENT_SOCKET=/tmp/trellis-dev-123/dev-1/agent.sock trellis agent leave
  trellis agent leave -control-addr 10.0.0.7:7711 -tls-ca-file trellis-agent-ca.pem \
      -tls-cert-file dc1-client-trellis-0.pem -tls-key-file dc1-client-trellis-0-key.pem`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			target, err := leaveTarget(socket, dataDir, controlAddr, tlsFiles)
			if err != nil {
				return cli.Usage(err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if err := agent.RequestLeave(ctx, target); err != nil {
				return err
			}
			fmt.Fprintf(e.Stdout, "Agent at %s left the cluster.\n", target)
			return nil
		},
	}
	cmd.Flags().StringVar(&socket, "socket", "", "path of the agent's control socket (env TRELLIS_AGENT_SOCKET; default "+defaultAgentSocket+")")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "data directory of the agent (on this machine): its control socket is there")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait for the tasks to stop and the leave to complete")
	cmd.Flags().StringVar(&controlAddr, "control-addr", "", "the agent's TCP control address (host:port; its -control-addr), reached over mutual TLS with -tls-ca-file, -tls-cert-file and -tls-key-file")
	cmd.Flags().StringVar(&tlsFiles.CAFile, "tls-ca-file", "", "with -control-addr: the cluster CA, which signed the agent's control certificate (PEM)")
	cmd.Flags().StringVar(&tlsFiles.CertFile, "tls-cert-file", "", "with -control-addr: a client certificate of the cluster CA to present (PEM)")
	cmd.Flags().StringVar(&tlsFiles.KeyFile, "tls-key-file", "", "the private key of -tls-cert-file (PEM)")
	cmd.Flags().StringVar(&tlsFiles.Datacenter, "datacenter", tlsutil.DefaultDatacenter, "with -control-addr: the datacenter the agent's control certificate names (control.<dc>.trellis)")
	return cmd
}

// leaveTarget is the control API `agent leave` talks to: a socket, or a
// TCP control address over mutual TLS.
func leaveTarget(socket, dataDir, controlAddr string, files tlsutil.Config) (agent.Control, error) {
	if controlAddr == "" {
		if files.Enabled() {
			return agent.Control{}, errors.New("-tls-ca-file, -tls-cert-file and -tls-key-file go with -control-addr")
		}
		path, err := agentSocket(socket, dataDir, os.Getenv("TRELLIS_AGENT_SOCKET"))
		return agent.Control{Socket: path}, err
	}
	if socket != "" || dataDir != "" {
		return agent.Control{}, errors.New("give -control-addr or a socket (-socket, -data-dir), not both")
	}
	if files.CAFile == "" || files.CertFile == "" || files.KeyFile == "" {
		return agent.Control{}, errors.New("-control-addr: needs -tls-ca-file, -tls-cert-file and -tls-key-file: the agent serves it over mutual TLS only")
	}
	tc, err := tlsutil.New(files)
	if err != nil {
		return agent.Control{}, err
	}
	return agent.Control{Addr: controlAddr, TLS: tc.OutgoingControlConfig()}, nil
}

// defaultAgentSocket is the control socket of an agent started as
// docs/orchestrator.md shows (-data-dir /var/lib/trellis/agent).
const defaultAgentSocket = "/var/lib/trellis/agent/" + agent.ControlSocketName

// agentSocket picks the control socket the CLI talks to: -socket, the
// socket in -data-dir, TRELLIS_AGENT_SOCKET, or the default, in that order.
func agentSocket(socket, dataDir, env string) (string, error) {
	switch {
	case socket != "" && dataDir != "":
		return "", errors.New("give -socket or -data-dir, not both")
	case socket != "":
		return socket, nil
	case dataDir != "":
		return agent.ControlSocket(dataDir), nil
	case env != "":
		return env, nil
	}
	return defaultAgentSocket, nil
}

// controlTLSConfig is the TLS of -control-addr: the certificate of
// -control-tls-cert-file, clients of the cluster CA (-tls-ca-file).
func controlTLSConfig(files tlsutil.Config, caFile, dc string) (*tls.Config, error) {
	if files.CertFile == "" || files.KeyFile == "" || caFile == "" {
		return nil, errors.New("-control-addr: needs TLS: give -control-tls-cert-file, -control-tls-key-file and -tls-ca-file (the CA whose client certificates may use it)")
	}
	files.CAFile, files.Datacenter = caFile, dc
	tc, err := tlsutil.New(files)
	if err != nil {
		return nil, fmt.Errorf("-control-addr: %w", err)
	}
	cfg, err := tc.IncomingControlConfig()
	if err != nil {
		return nil, fmt.Errorf("-control-addr: %w", err)
	}
	return cfg, nil
}

// parseAttributes parses -attribute key=value flags.
func parseAttributes(kvs []string) (map[string]string, error) {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("-attribute: %q is not key=value", kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("-attribute: %q is given twice", k)
		}
		out[k] = v
	}
	return out, nil
}

// defaultInstanceName makes a host name into an instance name: its first
// label, lowercased, other characters replaced by '-'; "" when nothing is
// left.
func defaultInstanceName(host string) string {
	host, _, _ = strings.Cut(strings.ToLower(host), ".")
	var b strings.Builder
	for _, c := range host {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
		} else {
			b.WriteByte('-')
		}
	}
	name := strings.Trim(b.String(), "-")
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-")
	}
	if resource.ValidateName("", name) != nil {
		return ""
	}
	return name
}
