package catalogmodule_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	miekg "github.com/miekg/dns"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/testcluster"
	"trellis.dev/trellis/internal/testlog"
)

// dnsServer starts a server in memory whose catalog serves DNS on a free
// port, and returns its API and the DNS address.
func dnsServer(t *testing.T) (resource.API, string) {
	t.Helper()
	mods, err := server.DefaultModulesWith("-dns-addr", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var cat interface{ DNSAddr() string }
	for _, m := range mods {
		if m.Name() == "catalog" {
			cat = m.(interface{ DNSAddr() string })
		}
	}
	srv, err := server.New(server.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Modules: mods, Logger: testlog.Logger(t), ShutdownTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	if err := testcluster.WaitFor(ctx, 10*time.Second, func() bool { return cat.DNSAddr() != "" }); err != nil {
		t.Fatal("the DNS interface does not listen: ", err)
	}
	return srv.API(), cat.DNSAddr()
}

// registerOutside registers an instance of service from outside Trellis,
// with one TTL check, and sets the check's status as the servers do.
func registerOutside(t *testing.T, api resource.API, name, service, addr string, port uint32, tags ...string) *pbresource.ID {
	t.Helper()
	ctx := context.Background()
	data, _ := anypb.New(&pbcatalog.ServiceInstance{Service: service, Address: addr, Port: port, Tags: tags,
		Checks: []*pbcatalog.CheckDefinition{{Name: "ttl", Ttl: durationpb.New(time.Hour)}}})
	out, err := api.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: catalog.ServiceInstanceID("default", name), Data: data}})
	if err != nil {
		t.Fatal(err)
	}
	return out.GetResource().GetId()
}

func setCheck(t *testing.T, api resource.API, id *pbresource.ID, st string) {
	t.Helper()
	now := timestamppb.Now()
	payload, _ := anypb.New(&pbcatalog.ChecksStatus{Checks: []*pbcatalog.CheckStatus{{Name: "ttl", Status: st, ChangedAt: now, CheckedAt: now}}, Health: st, ReportedAt: now})
	ctx := resource.AsController(context.Background(), catalog.HealthControllerName)
	if _, err := api.WriteStatus(ctx, &pbresource.WriteStatusRequest{Id: id, Key: catalog.ServerChecksStatusKey, Status: &pbresource.Status{Data: payload}}); err != nil {
		t.Fatal(err)
	}
}

// answers asks addr over net and returns the rcode and the answer's A
// addresses or SRV ports, sorted.
func answers(t *testing.T, network, addr, name string, qtype uint16) (int, []string) {
	t.Helper()
	m := new(miekg.Msg)
	m.SetQuestion(name, qtype)
	r, _, err := (&miekg.Client{Net: network, Timeout: 5 * time.Second}).Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s: %v", network, name, err)
	}
	var out []string
	for _, rr := range r.Answer {
		switch rr := rr.(type) {
		case *miekg.A:
			out = append(out, rr.A.String())
		case *miekg.SRV:
			out = append(out, rr.Target+":"+strconv.Itoa(int(rr.Port)))
		}
	}
	slices.Sort(out)
	return r.Rcode, out
}

// The server's DNS interface answers from its catalog, over UDP and TCP:
// the passing instances only, by tag, SRV with their ports; NXDOMAIN for
// a service nobody registered; and a check turning critical takes its
// instance out of the answers.
func TestServerDNSAnswersFromTheCatalog(t *testing.T) {
	api, addr := dnsServer(t)
	a1 := registerOutside(t, api, "api-1", "api", "10.0.0.1", 8080, "v1")
	a2 := registerOutside(t, api, "api-2", "api", "10.0.0.2", 8081, "v2")
	registerOutside(t, api, "api-3", "api", "10.0.0.3", 8082, "v1") // never reported: critical
	setCheck(t, api, a1, catalog.CheckPassing)
	setCheck(t, api, a2, catalog.CheckPassing)

	const name = "api.service.default.trellis."
	wait := func(what string, cond func() bool) {
		t.Helper()
		if err := testcluster.WaitFor(context.Background(), 10*time.Second, cond); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	wait("both passing instances answered", func() bool {
		_, got := answers(t, "udp", addr, name, miekg.TypeA)
		return slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"})
	})
	for _, network := range []string{"udp", "tcp"} {
		if rc, got := answers(t, network, addr, name, miekg.TypeA); rc != miekg.RcodeSuccess || !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"}) {
			t.Errorf("%s A: %s %q", network, miekg.RcodeToString[rc], got)
		}
		if rc, got := answers(t, network, addr, "v1.api.service.trellis.", miekg.TypeA); rc != miekg.RcodeSuccess || !slices.Equal(got, []string{"10.0.0.1"}) {
			t.Errorf("%s tag v1: %s %q", network, miekg.RcodeToString[rc], got)
		}
		if rc, got := answers(t, network, addr, name, miekg.TypeSRV); rc != miekg.RcodeSuccess || !slices.Equal(got, []string{"0a000001.addr.trellis.:8080", "0a000002.addr.trellis.:8081"}) {
			t.Errorf("%s SRV: %s %q", network, miekg.RcodeToString[rc], got)
		}
		if rc, _ := answers(t, network, addr, "nope.service.trellis.", miekg.TypeA); rc != miekg.RcodeNameError {
			t.Errorf("%s unknown service: %s; want NXDOMAIN", network, miekg.RcodeToString[rc])
		}
		if rc, _ := answers(t, network, addr, "example.com.", miekg.TypeA); rc != miekg.RcodeRefused {
			t.Errorf("%s outside the zone: %s; want REFUSED", network, miekg.RcodeToString[rc])
		}
	}

	setCheck(t, api, a1, catalog.CheckCritical)
	wait("the critical instance leaves the answers", func() bool {
		_, got := answers(t, "udp", addr, name, miekg.TypeA)
		return slices.Equal(got, []string{"10.0.0.2"})
	})
	setCheck(t, api, a2, catalog.CheckWarning)
	wait("no passing instance: the name still exists", func() bool {
		rc, got := answers(t, "tcp", addr, name, miekg.TypeA)
		return rc == miekg.RcodeSuccess && len(got) == 0
	})
}

// -dns-addr is checked before anything is set up, naming the flag.
func TestDNSAddrFlagIsChecked(t *testing.T) {
	for _, bad := range []string{"localhost:8600", "127.0.0.1", "127.0.0.1:99999"} {
		mods, err := server.DefaultModulesWith("-dns-addr", bad)
		if err != nil {
			t.Fatal(err)
		}
		err = (server.Config{Modules: mods}).Validate()
		if err == nil || !strings.Contains(err.Error(), "-dns-addr: ") {
			t.Errorf("-dns-addr %q: %v; want an error naming -dns-addr", bad, err)
		}
	}
	for _, p := range []module.Process{module.Server, module.Dev} {
		fs := pflag.NewFlagSet(string(p), pflag.ContinueOnError)
		if err := module.AddFlags(fs, p, server.DefaultModules()); err != nil {
			t.Fatal(err)
		}
		if f := fs.Lookup("dns-addr"); f == nil || f.DefValue != "127.0.0.1:8600" || f.Annotations[module.FlagModuleAnnotation][0] != "catalog" {
			t.Errorf("trellis %s -dns-addr: %+v; want the catalog's, default 127.0.0.1:8600", p, f)
		}
	}
}

// A -dns-addr in use (Consul's DNS has the same default port) fails
// server.New, as a port of the server's own does, naming the flag and the
// address, so that trellis dev stops before any agent has begun; what the
// failed server had bound is released, the DNS port and its own.
func TestDNSPortInUseFailsTheServersStart(t *testing.T) {
	_, taken := dnsServer(t)
	mods, err := server.DefaultModulesWith("-dns-addr", taken)
	if err != nil {
		t.Fatal(err)
	}
	_, err = server.New(server.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Modules: mods, Logger: testlog.Logger(t)})
	want := "-dns-addr: " + taken + " (tcp) is in use (a Consul agent"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("server.New with -dns-addr %s in use: %v; want an error with %q", taken, err, want)
	}

	// A server that fails after its DNS interface is bound (a module set
	// up after the catalog refuses) releases it: the port binds again.
	free := freeDNSAddr(t)
	mods, err = server.DefaultModulesWith("-dns-addr", free)
	if err != nil {
		t.Fatal(err)
	}
	_, err = server.New(server.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Modules: append(mods, refusingModule{}), Logger: testlog.Logger(t)})
	if err == nil || !strings.Contains(err.Error(), "module refusing: refused") {
		t.Fatalf("server.New with a module that refuses: %v", err)
	}
	for _, network := range []string{"tcp", "udp"} {
		var err error
		if network == "tcp" {
			var ln net.Listener
			if ln, err = net.Listen(network, free); err == nil {
				ln.Close()
			}
		} else {
			var pc net.PacketConn
			if pc, err = net.ListenPacket(network, free); err == nil {
				pc.Close()
			}
		}
		if err != nil {
			t.Errorf("the DNS port %s (%s) after the server failed: %v", free, network, err)
		}
	}
}

// refusingModule fails its Setup.
type refusingModule struct{}

func (refusingModule) Name() string                { return "refusing" }
func (refusingModule) Register(*resource.Registry) {}
func (refusingModule) Setup(module.Deps) (module.Parts, error) {
	return module.Parts{}, errors.New("refused")
}

// freeDNSAddr is a loopback address whose port is free for TCP and UDP.
func freeDNSAddr(t *testing.T) string {
	t.Helper()
	ports, err := testcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(ports[0])
}
