package camodule_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/ca/camodule"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/server"
)

// start runs an in-memory server of mods (the default modules when nil)
// until the test ends.
func start(t *testing.T, mods []module.Module) *server.Server {
	t.Helper()
	srv, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702",
		Modules: mods, ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start = %v", err)
		}
	})
	return srv
}

// eventually polls cond until it holds, failing the test after a long
// bound that only a broken server reaches.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func get(t *testing.T, url string, into any) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if into != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatalf("GET %s: %q is not JSON: %v", url, b, err)
		}
	}
	return resp.StatusCode, string(b)
}

func count(t *testing.T, api resource.API, typ *pbresource.Type) int {
	t.Helper()
	list, err := api.List(resource.FromOperations(context.Background()), &pbresource.ListRequest{Type: typ, Tenancy: &pbresource.Tenancy{}})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.GetResources())
}

// A server comes up with one generated root, active, of the cluster's
// trust domain, which /v1/ca/roots shows; a second leadership keeps it;
// /v1/ca/config reports the manager ready and holds no key.
func TestServerMakesOneRootAndServesIt(t *testing.T) {
	srv := start(t, nil)
	base := "http://" + srv.HTTPAddr()
	var roots camodule.RootsBody
	eventually(t, "an active root in /v1/ca/roots", func() bool {
		code, _ := get(t, base+"/v1/ca/roots", &roots)
		return code == http.StatusOK && roots.ActiveRootID != ""
	})
	clusterID, err := core.ClusterID(context.Background(), srv.API())
	if err != nil {
		t.Fatal(err)
	}
	if want := clusterID + ".trellis"; roots.TrustDomain != want {
		t.Errorf("trust_domain = %q, want %q", roots.TrustDomain, want)
	}
	if len(roots.Roots) != 1 {
		t.Fatalf("%d roots, want 1: %+v", len(roots.Roots), roots.Roots)
	}
	r := roots.Roots[0]
	if !r.Active || r.ID != roots.ActiveRootID || r.Name != ca.RootName(r.ID) || r.NotAfter == nil || r.RotatedOutAt != nil {
		t.Errorf("root = %+v", r)
	}
	certs, err := ca.ParseCerts([]byte(r.RootCert))
	if err != nil {
		t.Fatalf("root_cert does not parse: %v", err)
	}
	cert := certs[0]
	if !cert.IsCA || len(cert.URIs) != 1 || cert.URIs[0].String() != "spiffe://"+roots.TrustDomain {
		t.Errorf("root: CA %v, URIs %v; want a CA of spiffe://%s", cert.IsCA, cert.URIs, roots.TrustDomain)
	}
	if id, _ := ca.KeyID(cert.PublicKey); id != r.ID {
		t.Errorf("root id %q is not its key's id %q", r.ID, id)
	}
	if !cert.NotAfter.Equal(*r.NotAfter) {
		t.Errorf("not_after %v, certificate's %v", r.NotAfter, cert.NotAfter)
	}

	// A second leadership: the manager runs again, finds the root, keeps it.
	again, err := (&camodule.Manager{API: srv.API()}).Reconcile(context.Background())
	if err != nil || again.ActiveRootID != r.ID || again.RotatedOut != "" {
		t.Fatalf("second Reconcile = %+v, %v; want %q kept", again, err, r.ID)
	}
	if n, k := count(t, srv.API(), ca.RootType), count(t, srv.API(), ca.SigningKeyType); n != 1 || k != 1 {
		t.Errorf("%d roots and %d signing keys after a second run, want 1 and 1", n, k)
	}

	var cfg struct {
		Config  map[string]any `json:"config"`
		Manager map[string]any `json:"manager"`
	}
	eventually(t, "the manager reports ready", func() bool {
		code, _ := get(t, base+"/v1/ca/config", &cfg)
		return code == http.StatusOK && cfg.Manager["state"] == ca.StateReady
	})
	code, body := get(t, base+"/v1/ca/config", nil)
	if code != http.StatusOK || strings.Contains(body, "PRIVATE KEY") || strings.Contains(body, "private_key\"") {
		t.Errorf("GET /v1/ca/config = %d %s: want the settings without a key", code, body)
	}
	if cfg.Manager["active_root_id"] != r.ID || cfg.Config["provider"] != ca.ProviderBuiltin || cfg.Config["private_key_type"] != "ec" {
		t.Errorf("config = %v", cfg)
	}
	if _, body := get(t, base+"/v1/ca/roots", nil); strings.Contains(body, "PRIVATE KEY") {
		t.Errorf("/v1/ca/roots shows a private key")
	}
}

// caTypes serves the CA's types without its manager, so that the test
// runs the managers itself.
type caTypes struct{}

func (caTypes) Name() string                            { return "ca" }
func (caTypes) Register(r *resource.Registry)           { ca.Register(r) }
func (caTypes) Setup(module.Deps) (module.Parts, error) { return module.Parts{}, nil }

// raceAPI lets another leader's manager run to its end between this
// manager's list of the roots and its batch: the worst interleaving of
// two leaders in a row.
type raceAPI struct {
	resource.API
	other func() (string, error)
	once  sync.Once
	ran   string
}

func (a *raceAPI) WriteBatch(ctx context.Context, req *pbresource.WriteBatchRequest) (*pbresource.WriteBatchResponse, error) {
	var err error
	a.once.Do(func() { a.ran, err = a.other() })
	if err != nil {
		return nil, err
	}
	return a.API.WriteBatch(ctx, req)
}

// Two managers that run at once (an old leader still finishing, a new
// one starting) make one root between them: the batch's compare refuses
// the one that listed the roots before the other wrote its root, and its
// retry finds that root.
func TestConcurrentManagersMakeOneRoot(t *testing.T) {
	srv := start(t, []module.Module{core.Module(), caTypes{}})
	eventually(t, "the cluster id", func() bool {
		_, err := core.ClusterID(context.Background(), srv.API())
		return err == nil
	})
	now := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	other := &camodule.Manager{API: srv.API(), Now: clock}
	api := &raceAPI{API: srv.API(), other: func() (string, error) {
		out, err := other.Reconcile(context.Background())
		return out.ActiveRootID, err
	}}
	m := &camodule.Manager{API: api, Now: clock}
	if out, err := m.Reconcile(context.Background()); err == nil {
		t.Fatalf("Reconcile = %+v, nil: its batch should have failed, another root was written after its list", out)
	}
	if api.ran == "" {
		t.Fatal("the other manager made no root")
	}
	out, err := m.Reconcile(context.Background())
	if err != nil || out.ActiveRootID != api.ran {
		t.Fatalf("retried Reconcile = %+v, %v; want the other's root %q", out, err, api.ran)
	}
	if n, k := count(t, srv.API(), ca.RootType), count(t, srv.API(), ca.SigningKeyType); n != 1 || k != 1 {
		t.Errorf("%d roots and %d signing keys, want 1 and 1", n, k)
	}
	list, err := srv.API().List(context.Background(), &pbresource.ListRequest{Type: ca.RootType, Tenancy: &pbresource.Tenancy{}})
	if err != nil {
		t.Fatal(err)
	}
	root, err := resource.DecodeData[*pbca.CARoot](list.GetResources()[0])
	if err != nil {
		t.Fatal(err)
	}
	if !root.GetNotBefore().AsTime().Equal(now.Add(-time.Minute)) {
		t.Errorf("not_before %v: the manager's clock said %v", root.GetNotBefore().AsTime(), now)
	}
	if root.GetDatacenter() != "dc1" || root.GetTrustDomain() == "" {
		t.Errorf("root: datacenter %q, trust domain %q", root.GetDatacenter(), root.GetTrustDomain())
	}
}

// A manager that cannot make a root says why on the CAConfig, writes no
// root, and does not write the same failure again on each retry.
func TestManagerReportsFailure(t *testing.T) {
	srv := start(t, []module.Module{core.Module(), caTypes{}})
	eventually(t, "the cluster id", func() bool {
		_, err := core.ClusterID(context.Background(), srv.API())
		return err == nil
	})
	ctx := resource.FromOperations(context.Background())
	// A supplied root (any CA certificate will do for the settings'
	// check): the manager cannot use one yet.
	cert, _, err := ca.NewRoot(ca.RootOptions{TrustDomain: "11111111-2222-3333-4444-555555555555.trellis", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	c := &pbca.CAConfig{RootCert: string(ca.EncodeCerts(cert))}
	ca.FillConfigDefaults(c)
	data, err := anypb.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.API().Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: ca.ConfigID(), Data: data}}); err != nil {
		t.Fatal(err)
	}
	m := &camodule.Manager{API: srv.API()}
	stored := func() (*pbresource.Resource, *pbca.CAManagerStatus) {
		resp, err := srv.API().Read(ctx, &pbresource.ReadRequest{Id: ca.ConfigID()})
		if err != nil {
			t.Fatal(err)
		}
		var st pbca.CAManagerStatus
		if err := resp.GetResource().GetStatus()[ca.ManagerStatusKey].GetData().UnmarshalTo(&st); err != nil {
			t.Fatalf("no manager status: %v", err)
		}
		return resp.GetResource(), &st
	}
	if _, err := m.Reconcile(context.Background()); err == nil || !strings.Contains(err.Error(), "root_cert") {
		t.Fatalf("Reconcile = %v, want a refusal naming root_cert", err)
	}
	res, st := stored()
	if st.GetState() != ca.StateFailed || !strings.Contains(st.GetLastError(), "root_cert") || st.GetActiveRootId() != "" || st.GetLastAttempt() == nil {
		t.Errorf("status = %v, want failed naming root_cert", st)
	}
	if n := count(t, srv.API(), ca.RootType); n != 0 {
		t.Errorf("%d roots after a failure, want none", n)
	}
	if _, err := m.Reconcile(context.Background()); err == nil {
		t.Fatal("second Reconcile succeeded")
	}
	if again, _ := stored(); again.GetVersion() != res.GetVersion() {
		t.Errorf("the same failure was written again: version %s, then %s", res.GetVersion(), again.GetVersion())
	}
}
