package agent

import (
	"strings"
	"testing"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// An agent whose host lacks the CNI plugins runs host tasks, says
// network.bridge=false, and stops a bridge task placed on it with a
// reason that says how to install them.
func TestBridgeTaskWithoutThePlugins(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	cfg := config(t, "i-1", pt, srv)
	cfg.Network = &NetworkConfig{PluginDirs: []string{t.TempDir()}}
	a := startAgent(t, cfg)
	in := registered(t, srv, a)
	if got := in.GetAttributes()[orchestrator.AttrNetworkBridge]; got != "false" {
		t.Fatalf("network.bridge = %q, want false", got)
	}

	def := shDefinition("web", "exec sleep 1000")
	def.Network = orchestrator.NetworkBridge
	def.Ports = []*pborch.PortMapping{{Name: "http", ContainerPort: 8080, Protocol: "tcp"}}
	srv.registerDefinition(t, "default", def)
	srv.place(t, "default", "t1", "web:1", "i-1")
	tk := srv.waitTask(t, "default", "t1", "stops", lastStatus(orchestrator.StatusStopped))
	for _, want := range []string{"cannot start: network: bridge is not available on instance i-1", "apt-get install containernetworking-plugins"} {
		if !strings.Contains(tk.GetStopReason(), want) {
			t.Errorf("stop reason %q lacks %q", tk.GetStopReason(), want)
		}
	}
	if pt.starts.Load() != 0 {
		t.Errorf("%d runs started; a bridge task without its network must not run", pt.starts.Load())
	}

	// Host tasks still run.
	srv.registerDefinition(t, "default", shDefinition("plain", "exec sleep 1000"))
	srv.place(t, "default", "t2", "plain:1", "i-1")
	srv.waitTask(t, "default", "t2", "runs", lastStatus(orchestrator.StatusRunning))
}
