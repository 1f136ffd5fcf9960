package agent

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	miekg "github.com/miekg/dns"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/dns"
	"trellis.dev/trellis/internal/resource"
)

// dnsAnswers asks the agent's DNS over network: the rcode and the A
// addresses (or SRV targets:ports), sorted.
func dnsAnswers(t *testing.T, network, addr, name string, qtype uint16) (int, []string) {
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

// The agent's DNS component answers from the agent's informer: the
// passing instances of a service, by tag, SRV, NXDOMAIN for an unknown
// name; a check turning critical drops its instance; and with the
// servers gone it still answers what it last saw, since no query goes to
// a server.
func TestAgentDNSAnswersFromItsInformer(t *testing.T) {
	srv := startServer(t)
	api := srv.srv.API()
	ctx := context.Background()
	register := func(name, addr string, port uint32, tags ...string) *pbresource.ID {
		data, _ := anypb.New(&pbcatalog.ServiceInstance{Service: "api", Address: addr, Port: port, Tags: tags,
			Checks: []*pbcatalog.CheckDefinition{{Name: "ttl", Ttl: durationpb.New(time.Hour)}}})
		out, err := api.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: catalog.ServiceInstanceID("default", name), Data: data}})
		if err != nil {
			t.Fatal(err)
		}
		return out.GetResource().GetId()
	}
	check := func(id *pbresource.ID, st string) {
		now := timestamppb.Now()
		payload, _ := anypb.New(&pbcatalog.ChecksStatus{Checks: []*pbcatalog.CheckStatus{{Name: "ttl", Status: st, ChangedAt: now, CheckedAt: now}}, Health: st, ReportedAt: now})
		if _, err := api.WriteStatus(resource.AsController(ctx, catalog.HealthControllerName), &pbresource.WriteStatusRequest{Id: id, Key: catalog.ServerChecksStatusKey, Status: &pbresource.Status{Data: payload}}); err != nil {
			t.Fatal(err)
		}
	}
	a1 := register("api-1", "10.0.0.1", 8080, "v1")
	a2 := register("api-2", "10.0.0.2", 8081, "v2")
	register("api-3", "10.0.0.3", 8082) // no status yet: critical
	check(a1, catalog.CheckPassing)
	check(a2, catalog.CheckPassing)

	comp := dns.NewAgentComponent("127.0.0.1:0", 0)
	cfg := config(t, "i-1", newProcTable(t), srv)
	cfg.Components = []component.Maker{comp.Make}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Start(actx) }()
	t.Cleanup(func() { cancel(); <-done })
	addr := comp.Addr()
	if addr == "" {
		t.Fatal("the component does not listen once made")
	}

	const name = "api.service.default.trellis."
	eventually(t, "the agent answers the passing instances", func() bool {
		_, got := dnsAnswers(t, "udp", addr, name, miekg.TypeA)
		return slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"})
	})
	for _, network := range []string{"udp", "tcp"} {
		if rc, got := dnsAnswers(t, network, addr, "v2.api.service.trellis.", miekg.TypeA); rc != miekg.RcodeSuccess || !slices.Equal(got, []string{"10.0.0.2"}) {
			t.Errorf("%s tag v2: %s %q", network, miekg.RcodeToString[rc], got)
		}
		if rc, got := dnsAnswers(t, network, addr, name, miekg.TypeSRV); rc != miekg.RcodeSuccess || len(got) != 2 {
			t.Errorf("%s SRV: %s %q", network, miekg.RcodeToString[rc], got)
		}
		if rc, _ := dnsAnswers(t, network, addr, "nope.service.trellis.", miekg.TypeA); rc != miekg.RcodeNameError {
			t.Errorf("%s unknown: %s; want NXDOMAIN", network, miekg.RcodeToString[rc])
		}
	}
	eventually(t, "the agent answers its own Instance's address", func() bool {
		rc, got := dnsAnswers(t, "udp", addr, "i-1.instance.trellis.", miekg.TypeA)
		return rc == miekg.RcodeSuccess && slices.Equal(got, []string{"127.0.0.1"})
	})

	check(a1, catalog.CheckCritical)
	eventually(t, "the critical instance leaves the agent's answers", func() bool {
		_, got := dnsAnswers(t, "tcp", addr, name, miekg.TypeA)
		return slices.Equal(got, []string{"10.0.0.2"})
	})

	srv.stop()
	if rc, got := dnsAnswers(t, "udp", addr, name, miekg.TypeA); rc != miekg.RcodeSuccess || !slices.Equal(got, []string{"10.0.0.2"}) {
		t.Errorf("with the servers gone: %s %q; want what the agent last saw", miekg.RcodeToString[rc], got)
	}
}

// An agent whose DNS address is taken fails to start, saying so.
func TestAgentDNSAddressTakenFailsNew(t *testing.T) {
	srv := startServer(t)
	first := dns.NewAgentComponent("127.0.0.1:0", 0)
	cfg := config(t, "i-1", newProcTable(t), srv)
	cfg.Components = []component.Maker{first.Make}
	if _, err := New(cfg); err != nil {
		t.Fatal(err)
	}
	cfg2 := config(t, "i-2", newProcTable(t), srv)
	cfg2.Components = []component.Maker{dns.NewAgentComponent(first.Addr(), 0).Make}
	if _, err := New(cfg2); err == nil {
		t.Fatal("a second agent took the first one's DNS address")
	}
}
