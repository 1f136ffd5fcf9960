package testcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Agent is one `trellis agent` process: an instance. Kill (SIGKILL) and
// Stop (SIGTERM) leave its tasks running, and Start runs it again on the
// same data directory, local API address and flags, as an operator
// restarting it would.
type Agent struct {
	Name     string
	HTTPAddr string // the agent's local API (task metadata, logs, leave)
	DNSAddr  string // its DNS interface (-dns-addr), UDP and TCP
	DataDir  string
	LogPath  string

	process
}

// AgentOptions says how to start an agent.
type AgentOptions struct {
	Bin string // the trellis binary
	// Dir is where the agent's data directory (Dir/Name) and log
	// (Dir/Name.log) go.
	Dir  string
	Name string // the instance's name
	// Servers are gRPC addresses of servers (Member.GRPCAddr).
	Servers []string
	// Attributes become -attribute key=value flags.
	Attributes map[string]string
	// Extra flags for the agent.
	Extra []string
}

// StartAgent starts an agent and returns at once; the agent registers its
// instance on its own (wait for the Instance to be ready through the API).
// Its local API listens on a port chosen here and kept across restarts.
func StartAgent(o AgentOptions) (*Agent, error) {
	if o.Name == "" || len(o.Servers) == 0 {
		return nil, errors.New("testcluster: an agent needs a name and at least one server")
	}
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	if err := searchableUpTo(o.Dir, os.TempDir()); err != nil {
		return nil, err
	}
	a := &Agent{
		Name:     o.Name,
		HTTPAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		DNSAddr:  fmt.Sprintf("127.0.0.1:%d", ports[1]),
		DataDir:  filepath.Join(o.Dir, o.Name),
		LogPath:  filepath.Join(o.Dir, o.Name+".log"),
	}
	args := []string{"agent", "-name", o.Name, "-data-dir", a.DataDir, "-http-addr", a.HTTPAddr, "-dns-addr", a.DNSAddr}
	args = append(args, serverAndAttributeFlags(o.Servers, o.Attributes)...)
	args = append(args, o.Extra...)
	a.process = process{name: "agent " + o.Name, bin: o.Bin, args: args, logPath: a.LogPath}
	if err := a.Start(); err != nil {
		return nil, err
	}
	return a, nil
}

// serverAndAttributeFlags are the -server and -attribute flags that
// `trellis agent` and `trellis sim` share, attributes in key order.
func serverAndAttributeFlags(servers []string, attrs map[string]string) []string {
	var args []string
	for _, s := range servers {
		args = append(args, "-server", s)
	}
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		args = append(args, "-attribute", k+"="+attrs[k])
	}
	return args
}

// searchableUpTo adds o+x to dir and its parents below top: the proxies of
// the agent's mesh tasks run as uid 1337 and reach their socket under the
// data dir, whose parents (a test's t.TempDir, private) the agent refuses
// otherwise. Nothing above top, or outside it, is changed.
func searchableUpTo(dir, top string) error {
	top = filepath.Clean(top)
	for d := filepath.Clean(dir); strings.HasPrefix(d, top+string(filepath.Separator)); d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if err := os.Chmod(d, fi.Mode().Perm()|0o001); err != nil {
			return err
		}
	}
	return nil
}
