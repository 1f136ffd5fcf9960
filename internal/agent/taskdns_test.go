package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	miekg "github.com/miekg/dns"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/dns"
	"trellis.dev/trellis/internal/netns"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/tasknet"
)

// needCNI skips where bridge tasks cannot run: not root, no plugins.
func needCNI(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: bridge tasks make network namespaces")
	}
	if err := tasknet.Probe(tasknet.DefaultConfig("/")); err != nil {
		t.Skip(err)
	}
	if _, err := exec.LookPath("iptables-restore"); err != nil {
		t.Skip("needs iptables-restore")
	}
}

// upstream is a DNS server of the test's own, on the host: the recursor
// the agent forwards to. It answers outside.example. and NXDOMAIN to the
// rest.
func upstream(t *testing.T) netip.AddrPort {
	t.Helper()
	h := miekg.HandlerFunc(func(w miekg.ResponseWriter, req *miekg.Msg) {
		m := new(miekg.Msg)
		m.SetReply(req)
		if q := req.Question[0]; q.Name == "outside.example." && q.Qtype == miekg.TypeA {
			m.Answer = append(m.Answer, &miekg.A{Hdr: miekg.RR_Header{Name: q.Name, Rrtype: miekg.TypeA, Class: miekg.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 77)})
		} else {
			m.Rcode = miekg.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	for _, srv := range []*miekg.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ActivateAndServe() //nolint:errcheck // ends at Shutdown
		<-started
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return pc.LocalAddr().(*net.UDPAddr).AddrPort()
}

// askIn asks a DNS question from inside the namespace at path, over
// network, of server: the rcode and the A addresses.
func askIn(t *testing.T, path, network, server, name string) (int, []string) {
	t.Helper()
	rc, out, err := tryAskIn(path, network, server, name)
	if err != nil {
		t.Fatalf("%s %s from the task's namespace: %v", network, name, err)
	}
	return rc, out
}

func tryAskIn(path, network, server, name string) (int, []string, error) {
	var r *miekg.Msg
	err := netns.Do(path, func() error {
		m := new(miekg.Msg)
		m.SetQuestion(name, miekg.TypeA)
		var err error
		r, _, err = (&miekg.Client{Net: network, Timeout: 5 * time.Second}).Exchange(m, server)
		return err
	})
	if err != nil {
		return 0, nil, err
	}
	var out []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*miekg.A); ok {
			out = append(out, a.A.String())
		}
	}
	slices.Sort(out)
	return r.Rcode, out, nil
}

// A bridge task resolves through its agent: from inside its real
// namespace, a query to any resolver gets the trellis. names from the
// agent's cache and every other name from the recursor; the agent killed
// and started again serves the adopted namespace again; once the task
// stops nothing of it is left.
func TestBridgeTaskResolvesThroughItsAgent(t *testing.T) {
	needCNI(t)
	srv := startServer(t)
	api := srv.srv.API()
	ctx := context.Background()
	data, _ := anypb.New(&pbcatalog.ServiceInstance{Service: "api", Address: "10.0.0.1", Port: 8080,
		Checks: []*pbcatalog.CheckDefinition{{Name: "ttl", Ttl: durationpb.New(time.Hour)}}})
	out, err := api.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: catalog.ServiceInstanceID("default", "api-1"), Data: data}})
	if err != nil {
		t.Fatal(err)
	}
	now := timestamppb.Now()
	payload, _ := anypb.New(&pbcatalog.ChecksStatus{Checks: []*pbcatalog.CheckStatus{{Name: "ttl", Status: catalog.CheckPassing, ChangedAt: now, CheckedAt: now}}, Health: catalog.CheckPassing, ReportedAt: now})
	if _, err := api.WriteStatus(resource.AsController(ctx, catalog.HealthControllerName), &pbresource.WriteStatusRequest{Id: out.GetResource().GetId(), Key: catalog.ServerChecksStatusKey, Status: &pbresource.Status{Data: payload}}); err != nil {
		t.Fatal(err)
	}
	up := upstream(t)

	bridge := fmt.Sprintf("trdns%d", rand.IntN(1_000_000))
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", bridge).Run() })
	cfg := config(t, "i-1", newProcTable(t), srv)
	cfg.Network = &NetworkConfig{Bridge: bridge, Subnet: netip.MustParsePrefix(fmt.Sprintf("10.251.%d.0/24", rand.IntN(256)))}
	newComp := func() component.Maker {
		return dns.NewAgentComponent("127.0.0.1:0", 0).WithRecursors([]netip.AddrPort{up}).Make
	}
	cfg.Components = []component.Maker{newComp()}
	a := startAgent(t, cfg)
	registered(t, srv, a)

	def := shDefinition("web", "exec sleep 1000")
	def.Network = orchestrator.NetworkBridge
	srv.registerDefinition(t, "default", def)
	srv.place(t, "default", "t1", "web:1", "i-1")
	tk := srv.waitTask(t, "default", "t1", "runs in its namespace", func(tk *storedTask) bool {
		return tk.GetLastStatus() == orchestrator.StatusRunning && tk.GetNetwork().GetNamespacePath() != ""
	})
	path := tk.GetNetwork().GetNamespacePath()
	// The bridge's address: nothing answers DNS there, on the host; the
	// rules take the query to the agent wherever it was sent.
	resolver := cfg.Network.Subnet.Addr().Next().String() + ":53"

	check := func(when string) {
		t.Helper()
		eventually(t, when+": the task resolves a trellis name", func() bool {
			// Refused while a restarted agent has not served the
			// namespace again yet.
			rc, got, err := tryAskIn(path, "udp", resolver, "api.service.default.trellis.")
			return err == nil && rc == miekg.RcodeSuccess && slices.Equal(got, []string{"10.0.0.1"})
		})
		for _, network := range []string{"udp", "tcp"} {
			if rc, got := askIn(t, path, network, resolver, "api.service.default.trellis."); rc != miekg.RcodeSuccess || !slices.Equal(got, []string{"10.0.0.1"}) {
				t.Errorf("%s: %s trellis name: %s %q", when, network, miekg.RcodeToString[rc], got)
			}
			if rc, _ := askIn(t, path, network, resolver, "nope.service.trellis."); rc != miekg.RcodeNameError {
				t.Errorf("%s: %s unknown trellis name: %s, want NXDOMAIN", when, network, miekg.RcodeToString[rc])
			}
			if rc, got := askIn(t, path, network, resolver, "outside.example."); rc != miekg.RcodeSuccess || !slices.Equal(got, []string{"192.0.2.77"}) {
				t.Errorf("%s: %s name forwarded to the recursor: %s %q", when, network, miekg.RcodeToString[rc], got)
			}
			if rc, _ := askIn(t, path, network, resolver, "missing.example."); rc != miekg.RcodeNameError {
				t.Errorf("%s: %s recursor's NXDOMAIN: %s", when, network, miekg.RcodeToString[rc])
			}
		}
	}
	check("set up")

	// A restarted agent adopts the namespace and serves it again (on
	// another port: its rules are written again).
	a.kill(t)
	cfg.Components = []component.Maker{newComp()}
	a = startAgent(t, cfg)
	check("adopted")

	srv.editTask(t, "default", "t1", func(tk *pborch.Task) { tk.DesiredStatus = orchestrator.StatusStopped })
	srv.waitTask(t, "default", "t1", "stops", lastStatus(orchestrator.StatusStopped))
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the namespace's mount point is still there: %v", err)
	}
	a.network.mu.Lock()
	left := len(a.network.dnsByUID)
	a.network.mu.Unlock()
	if left != 0 {
		t.Errorf("%d DNS listeners left once the task stopped", left)
	}
}
