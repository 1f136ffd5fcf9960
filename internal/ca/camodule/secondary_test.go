package camodule_test

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbstorage "trellis.dev/trellis/api/storage/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/ca/camodule"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/testcluster"
	"trellis.dev/trellis/internal/tlsutil"
)

// startDC runs a one-server Raft cluster of datacenter dc with the core
// and the CA, a secondary of primaryDC at primaryAddrs (server-to-server
// addresses) when primaryDC is set. A Raft server, for its
// server-to-server port: that is where a primary serves its secondaries.
// Its CA reads the primary every 100 ms, so that a rotation reaches it
// while the test waits. It returns the server and a stop that the test
// may call early (the cleanup calls it too).
func startDC(t *testing.T, dc, primaryDC string, primaryAddrs ...string) (*server.Server, func()) {
	t.Helper()
	return startDCWith(t, dc, primaryDC, nil, primaryAddrs...)
}

// startDCWith is startDC with TLS (serveTLS): on its server ports, which
// a secondary dials the primary's with, and on its public port.
func startDCWith(t *testing.T, dc, primaryDC string, serveTLS *tlsutil.Configurator, primaryAddrs ...string) (*server.Server, func()) {
	t.Helper()
	ports, err := testcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]), ServerAddr: "127.0.0.1:0",
		Raft:       &server.RaftConfig{DataDir: t.TempDir(), BootstrapExpect: 1, SingleServer: true},
		Datacenter: dc, TLS: serveTLS,
		ShutdownTimeout: 10 * time.Second,
		Modules: []module.Module{core.Module(), camodule.New(camodule.Config{
			PrimaryDatacenter: primaryDC, PrimaryAddrs: primaryAddrs, PrimaryPollInterval: 100 * time.Millisecond,
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start = %v", err)
		}
	}
	t.Cleanup(stop)
	return srv, stop
}

// managerStatus reads the CA manager's report from GET /v1/ca/config;
// empty before the manager has written the configuration.
func managerStatus(t *testing.T, base string) map[string]any {
	t.Helper()
	var cfg struct {
		Manager map[string]any `json:"manager"`
	}
	if code, body := get(t, base+"/v1/ca/config", &cfg); code != http.StatusOK && code != http.StatusNotFound {
		t.Fatalf("GET /v1/ca/config = %d %s", code, body)
	}
	if cfg.Manager == nil {
		return map[string]any{"message": "", "last_error": ""}
	}
	return cfg.Manager
}

// leafIn signs a leaf of service svc in datacenter dc at the server base.
func leafIn(t *testing.T, base, td, dc, svc string) (camodule.SignBody, crypto.Signer) {
	t.Helper()
	key := p256(t)
	id := ca.ServiceID{TrustDomain: td, Namespace: "default", Datacenter: dc, Service: svc}
	return signOK(t, base, newCSR(t, key, []string{id.String()})), key
}

// poolOf is a pool of the given roots alone.
func poolOf(certs ...*x509.Certificate) []*x509.Certificate { return certs }

// handshake runs a TLS 1.3 handshake over loopback TCP between a server
// holding leaf a and a client holding leaf b, each trusting only roots and
// asking the other for its certificate, and returns the SPIFFE ids each
// side saw of the other.
func handshake(t *testing.T, roots []*x509.Certificate, a camodule.SignBody, aKey crypto.Signer, b camodule.SignBody, bKey crypto.Signer, serverName string) (serverSaw, clientSaw string) {
	t.Helper()
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r)
	}
	pair := func(leaf camodule.SignBody, key crypto.Signer) tls.Certificate {
		var c tls.Certificate
		for _, x := range append(parseCerts(t, leaf.CertPEM), parseCerts(t, leaf.ChainPEM)...) {
			c.Certificate = append(c.Certificate, x.Raw)
		}
		c.PrivateKey = key
		return c
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair(a, aKey)}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		uri string
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			done <- result{err: err}
			return
		}
		done <- result{uri: tc.ConnectionState().PeerCertificates[0].URIs[0].String()}
	}()
	cli, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair(b, bKey)}, RootCAs: pool, ServerName: serverName})
	if err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	defer cli.Close()
	r := <-done
	if r.err != nil {
		t.Fatalf("server handshake: %v", r.err)
	}
	return r.uri, cli.ConnectionState().PeerCertificates[0].URIs[0].String()
}

// A secondary datacenter on loopback: its leader takes the primary's
// roots and trust domain and an intermediate from the primary; its leaves
// name dc2, chain to the primary's root (crypto/x509 and openssl), and
// services of both datacenters accept each other in a TLS handshake. When
// the primary rotates, the secondary gets the new roots and a new
// intermediate, and its new leaves verify against the new root alone and
// the old root alone. The secondary refuses to rotate itself and to sign
// intermediates, and keeps signing when the primary is gone.
func TestSecondaryDatacenter(t *testing.T) {
	primary, stopPrimary := startDC(t, "dc1", "")
	pBase := "http://" + primary.HTTPAddr()
	pRoots := activeRoots(t, pBase)
	secondary, _ := startDC(t, "dc2", "dc1", primary.ServerAddr())
	sBase := "http://" + secondary.HTTPAddr()

	var sRoots camodule.RootsBody
	eventually(t, "the secondary has the primary's active root", func() bool {
		code, _ := get(t, sBase+"/v1/ca/roots", &sRoots)
		return code == http.StatusOK && sRoots.ActiveRootID == pRoots.ActiveRootID
	})
	if sRoots.TrustDomain != pRoots.TrustDomain || sRoots.Datacenter != "dc2" || len(sRoots.Roots) != 1 {
		t.Fatalf("secondary roots = %+v; want the primary's trust domain %q, datacenter dc2, one root", sRoots, pRoots.TrustDomain)
	}
	if sRoots.Roots[0].RootCert != pRoots.Roots[0].RootCert {
		t.Error("the secondary's root is not the primary's certificate")
	}
	ownTD, err := core.ClusterID(context.Background(), secondary.API())
	if err != nil || ownTD+".trellis" == sRoots.TrustDomain {
		t.Fatalf("the secondary's own cluster id %q, err %v: its trust domain must be the primary's", ownTD, err)
	}
	eventually(t, "the secondary's manager reports ready", func() bool {
		return managerStatus(t, sBase)["state"] == ca.StateReady
	})
	if st := managerStatus(t, sBase); !strings.Contains(st["message"].(string), `a secondary of datacenter "dc1"`) {
		t.Errorf("secondary status = %v", st)
	}

	// Leaves of dc2 from the secondary, dc1 from the primary.
	td := pRoots.TrustDomain
	now := time.Now()
	web2, web2Key := leafIn(t, sBase, td, "dc2", "web")
	cert := verifyAsPeer(t, pRoots, web2, now)
	if got, want := cert.URIs[0].String(), "spiffe://"+td+"/ns/default/dc/dc2/svc/web"; got != want {
		t.Errorf("dc2 leaf names %s, want %s", got, want)
	}
	chain := parseCerts(t, web2.ChainPEM)
	if len(chain) != 1 || !chain[0].IsCA || !chain[0].MaxPathLenZero {
		t.Errorf("dc2 leaf chain = %d certificates, want the secondary's intermediate", len(chain))
	}
	verifyWithOpenSSL(t, pRoots, web2)
	if m := regexp.MustCompile(`(?m)^trellis_ca_signing_cert_expiry_seconds (\S+)$`).FindStringSubmatch(scrape(t, sBase)); m == nil {
		t.Error("the secondary does not report when its intermediate expires")
	} else if secs, _ := strconv.ParseFloat(m[1], 64); secs < (ca.DefaultIntermediateTTL - time.Hour).Seconds() {
		t.Errorf("the intermediate expires in %s s, want about %v", m[1], ca.DefaultIntermediateTTL)
	}
	api1, api1Key := leafIn(t, pBase, td, "dc1", "api")
	primaryRoot := rootCerts(t, pRoots.Roots...)
	serverSaw, clientSaw := handshake(t, primaryRoot, web2, web2Key, api1, api1Key, "web.svc.default.dc2.trellis")
	if !strings.Contains(serverSaw, "/dc/dc1/svc/api") || !strings.Contains(clientSaw, "/dc/dc2/svc/web") {
		t.Errorf("the dc2 server saw %s, the dc1 client saw %s", serverSaw, clientSaw)
	}
	serverSaw, clientSaw = handshake(t, primaryRoot, api1, api1Key, web2, web2Key, "api.svc.default.dc1.trellis")
	if !strings.Contains(serverSaw, "/dc/dc2/svc/web") || !strings.Contains(clientSaw, "/dc/dc1/svc/api") {
		t.Errorf("the dc1 server saw %s, the dc2 client saw %s", serverSaw, clientSaw)
	}
	// The secondary signs for its own datacenter only.
	if resp, body := postSign(t, sBase, newCSR(t, p256(t), []string{ca.ServiceID{TrustDomain: td, Namespace: "default", Datacenter: "dc1", Service: "web"}.String()})); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"datacenter"`) {
		t.Errorf("a dc1 CSR at the secondary = %d %s, want 400 naming the datacenter", resp.StatusCode, body)
	}

	// Nor a server's identity, of its datacenter or another: a server
	// signs its own leaf, and the CA signs none on request, in a
	// secondary as in the primary.
	for _, dc := range []string{"dc2", "dc1"} {
		id := ca.ServerID{TrustDomain: td, Datacenter: dc, Server: "evil"}
		if resp, body := postSign(t, sBase, newCSR(t, p256(t), []string{id.String()})); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), ca.ReasonServerID) {
			t.Errorf("a CSR for %s at the secondary = %d %s, want 400 %s", id, resp.StatusCode, body, ca.ReasonServerID)
		}
	}

	// The secondary neither rotates nor signs intermediates.
	before := stored(t, secondary.API())
	code, body := put(t, sBase+"/v1/ca/config", `{"config": {"rotation": 5}}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "rotation") || !strings.Contains(body, "secondary") {
		t.Errorf("PUT rotation at the secondary = %d %s, want 400 naming rotation", code, body)
	}
	if code, body := put(t, sBase+"/v1/ca/config", `{"config": {"private_key_type": "rsa", "private_key_bits": 2048}}`); code != http.StatusBadRequest || !strings.Contains(body, "private_key_type") {
		t.Errorf("PUT key type at the secondary = %d %s, want 400 naming private_key_type", code, body)
	}
	if after := stored(t, secondary.API()); !sameMap(before, after) {
		t.Errorf("refused changes wrote: %v -> %v", before, after)
	}
	if code, body := put(t, sBase+"/v1/ca/config", `{"config": {"leaf_ttl": "24h"}}`); code != http.StatusOK {
		t.Errorf("PUT leaf_ttl at the secondary = %d %s, want 200", code, body)
	}
	conn, err := grpc.NewClient(secondary.ServerAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	csr, err := ca.NewIntermediateCSR(p256(t), td, "dc3")
	if err != nil {
		t.Fatal(err)
	}
	_, err = pbca.NewCAFederationClient(conn).SignIntermediate(context.Background(), &pbca.SignIntermediateRequest{CsrPem: string(csr), Datacenter: "dc3"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "secondary") {
		t.Errorf("SignIntermediate at the secondary = %v, want FailedPrecondition", err)
	}

	// A rotation in the primary reaches the secondary.
	oldRoot := rootCerts(t, pRoots.Roots[0])[0]
	if code, body := put(t, pBase+"/v1/ca/config", `{"config": {"rotation": 1}}`); code != http.StatusOK {
		t.Fatalf("PUT rotation at the primary = %d %s", code, body)
	}
	pRoots = waitRotated(t, pBase, pRoots.ActiveRootID)
	eventually(t, "the secondary has the primary's new root", func() bool {
		code, _ := get(t, sBase+"/v1/ca/roots", &sRoots)
		return code == http.StatusOK && sRoots.ActiveRootID == pRoots.ActiveRootID && len(sRoots.Roots) == 2
	})
	var newRoot *x509.Certificate
	for _, r := range pRoots.Roots {
		if r.Active {
			newRoot = rootCerts(t, r)[0]
		}
	}
	var web2b camodule.SignBody
	eventually(t, "the secondary signs under the new root", func() bool {
		web2b, _ = leafIn(t, sBase, td, "dc2", "web")
		return ca.VerifyLeaf([]byte(web2b.CertPEM+web2b.ChainPEM), poolOf(newRoot), time.Now()) == nil
	})
	for name, roots := range map[string][]*x509.Certificate{"the new root alone": poolOf(newRoot), "the old root alone": poolOf(oldRoot), "the bundle": rootCerts(t, pRoots.Roots...)} {
		if err := ca.VerifyLeaf([]byte(web2b.CertPEM+web2b.ChainPEM), roots, time.Now()); err != nil {
			t.Errorf("a dc2 leaf after the rotation does not verify against %s: %v", name, err)
		}
	}
	if n := len(parseCerts(t, web2b.ChainPEM)); n != 2 {
		t.Errorf("a dc2 leaf after the rotation carries %d certificates, want the intermediate and the cross-signed root", n)
	}
	verifyWithOpenSSL(t, pRoots, web2b)
	if n := count(t, secondary.API(), ca.SigningKeyType); n != 1 {
		t.Errorf("the secondary holds %d signing keys, want the new intermediate's alone", n)
	}

	// The primary gone: the secondary says why and keeps signing.
	stopPrimary()
	eventually(t, "the secondary reports that the primary cannot be reached", func() bool {
		st := managerStatus(t, sBase)
		return st["state"] == ca.StateFailed && st["active_root_id"] == pRoots.ActiveRootID &&
			strings.Contains(st["message"].(string), "keeps signing") && strings.Contains(st["last_error"].(string), primary.ServerAddr())
	})
	web2c, _ := leafIn(t, sBase, td, "dc2", "web")
	if err := ca.VerifyLeaf([]byte(web2c.CertPEM+web2c.ChainPEM), poolOf(newRoot), time.Now()); err != nil {
		t.Errorf("a dc2 leaf signed while the primary is gone: %v", err)
	}
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A secondary pointed at an address that answers but is not the primary
// (another secondary, a primary of another name, an HTTP port) or at
// nothing fails clearly in its status and stores no root and no key.
func TestSecondaryPointedAtNonPrimary(t *testing.T) {
	primary, _ := startDC(t, "dc1", "")
	activeRoots(t, "http://"+primary.HTTPAddr())
	dc2, _ := startDC(t, "dc2", "dc1", primary.ServerAddr())
	eventually(t, "dc2 is ready", func() bool { return managerStatus(t, "http://"+dc2.HTTPAddr())["state"] == ca.StateReady })
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nothing := closed.Addr().String()
	closed.Close()

	tests := []struct {
		name, primaryDC, addr string
		says                  []string
	}{
		{"another secondary", "dc1", dc2.ServerAddr(), []string{"not the primary", `a secondary of "dc1"`}},
		{"a primary of another name", "dc9", primary.ServerAddr(), []string{"not the primary", `made in datacenter "dc1", not in the primary "dc9"`}},
		{"an HTTP address", "dc1", primary.HTTPAddr(), []string{"not as a gRPC server", "-server-addr"}},
		{"the public gRPC address", "dc1", primary.GRPCAddr(), []string{"does not serve the CA's federation", "-server-addr"}},
		{"nothing there", "dc1", nothing, []string{"no server of the primary answered", nothing}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Each case waits on its own server's start (a Raft election);
			// they share only the two servers above, which they read.
			t.Parallel()
			srv, _ := startDC(t, "dc3", tt.primaryDC, tt.addr)
			base := "http://" + srv.HTTPAddr()
			var st map[string]any
			eventually(t, "the manager reports the failure", func() bool {
				st = managerStatus(t, base)
				return st["state"] == ca.StateFailed
			})
			msg, _ := st["last_error"].(string)
			t.Logf("status: %s; last_error: %s", st["message"], msg)
			for _, s := range tt.says {
				if !strings.Contains(msg, s) {
					t.Errorf("last_error %q does not say %q", msg, s)
				}
			}
			if !strings.Contains(st["message"].(string), "nothing is stored") {
				t.Errorf("message = %q", st["message"])
			}
			if r, k := count(t, srv.API(), ca.RootType), count(t, srv.API(), ca.SigningKeyType); r != 0 || k != 0 {
				t.Errorf("%d roots and %d keys stored, want none", r, k)
			}
			if resp, body := postSign(t, base, newCSR(t, p256(t), []string{"spiffe://x.trellis/ns/default/dc/dc3/svc/web"})); resp.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("signing at a secondary without an intermediate = %d %s, want 503", resp.StatusCode, body)
			}
		})
	}
}

// The primary's SignIntermediate refuses, naming the field, a request
// that is not a secondary's CA request of its trust domain, and signs one
// that is, with the chain up to its root.
func TestSignIntermediateRefusals(t *testing.T) {
	primary, _ := startDC(t, "dc1", "")
	roots := activeRoots(t, "http://"+primary.HTTPAddr())
	conn, err := grpc.NewClient(primary.ServerAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pbca.NewCAFederationClient(conn)
	key := p256(t)
	good, err := ca.NewIntermediateCSR(key, roots.TrustDomain, "dc2")
	if err != nil {
		t.Fatal(err)
	}
	other, err := ca.NewIntermediateCSR(key, "11111111-1111-4111-8111-111111111111.trellis", "dc2")
	if err != nil {
		t.Fatal(err)
	}
	leafCSR := newCSR(t, key, []string{"spiffe://" + roots.TrustDomain})
	tests := []struct {
		name, csr, dc, says string
	}{
		{"not PEM", "hello", "dc2", "csr: it is not PEM"},
		{"no datacenter", string(good), "", "datacenter: missing"},
		{"the primary's datacenter", string(good), "dc1", "datacenter: \"dc1\" is the primary's own"},
		{"another trust domain", string(other), "dc2", "csr.uri_san: it asks for trust domain"},
		{"a leaf's CSR", leafCSR, "dc2", "csr.extensions: it does not ask for a CA certificate"},
	}
	// What the refusals could write is data (a root, a key, the config):
	// compared by generation, which the CA manager's own status writes,
	// still coming in after the roots are active, leave alone.
	before := storedGenerations(t, primary.API())
	for _, tt := range tests {
		_, err := client.SignIntermediate(context.Background(), &pbca.SignIntermediateRequest{CsrPem: tt.csr, Datacenter: tt.dc})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: SignIntermediate = %v, want InvalidArgument saying %q", tt.name, err, tt.says)
		}
	}
	if after := storedGenerations(t, primary.API()); !sameMap(before, after) {
		t.Errorf("refusals wrote: %v -> %v", before, after)
	}
	resp, err := client.SignIntermediate(context.Background(), &pbca.SignIntermediateRequest{CsrPem: string(good), Datacenter: "dc2"})
	if err != nil {
		t.Fatal(err)
	}
	inter, _, err := ca.CheckIntermediate([]byte(resp.GetCertPem()), []byte(resp.GetChainPem()), key.Public(), rootCerts(t, roots.Roots...)[0], time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(inter.NotAfter); d < ca.DefaultIntermediateTTL-time.Hour || d > ca.DefaultIntermediateTTL {
		t.Errorf("the intermediate lives %v, want intermediate_ttl (%v)", d, ca.DefaultIntermediateTTL)
	}
	if strings.Contains(resp.String(), "PRIVATE KEY") {
		t.Error("the answer holds a private key")
	}
}

// A secondary renews its intermediate at half its life, with its clock
// injected: before that it keeps it, and a renewal replaces the key and
// the intermediate under the same root.
func TestSecondaryRenewsAtHalfLife(t *testing.T) {
	primary, _ := startDC(t, "dc1", "")
	roots := activeRoots(t, "http://"+primary.HTTPAddr())
	sec := start(t, []module.Module{core.Module(), caTypes{}})
	eventually(t, "the cluster id", func() bool {
		_, err := core.ClusterID(context.Background(), sec.API())
		return err == nil
	})
	client := camodule.NewPrimaryClient([]string{primary.ServerAddr()}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = client.Start(ctx) }()
	now := time.Now()
	mgr := &camodule.Manager{API: sec.API(), Now: func() time.Time { return now }, Datacenter: "dc2", Primary: client, PrimaryDatacenter: "dc1"}

	out, err := mgr.Reconcile(context.Background())
	if err != nil || out.ActiveRootID != roots.ActiveRootID {
		t.Fatalf("Reconcile = %+v, %v", out, err)
	}
	first := signingKey(t, sec.API(), roots.ActiveRootID)
	inter := parseCerts(t, first.GetSigningCert())[0]
	renewAt := ca.RenewAt(inter.NotBefore, inter.NotAfter)
	if out.Recheck.After(renewAt) || !out.Recheck.After(now) {
		t.Errorf("recheck at %v; want after now and no later than the renewal at %v", out.Recheck, renewAt)
	}

	now = renewAt.Add(-time.Second)
	if _, err := mgr.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if k := signingKey(t, sec.API(), roots.ActiveRootID); k.GetSigningCert() != first.GetSigningCert() {
		t.Fatal("renewed before half its life")
	}

	now = renewAt
	if _, err := mgr.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	second := signingKey(t, sec.API(), roots.ActiveRootID)
	if second.GetSigningCert() == first.GetSigningCert() || second.GetPrivateKey() == first.GetPrivateKey() {
		t.Fatal("not renewed at half its life")
	}
	stored := storedRoots(t, sec.API())
	root := stored[roots.ActiveRootID]
	if root.GetSigningCert() != second.GetSigningCert() || len(root.GetIntermediateCerts()) != 0 {
		t.Errorf("the active root does not carry the new intermediate: signing_cert %v, intermediate_certs %d (want the primary's: none before a rotation)",
			root.GetSigningCert() == second.GetSigningCert(), len(root.GetIntermediateCerts()))
	}
	b, _ := protojson.Marshal(root)
	if strings.Contains(string(b), "PRIVATE KEY") {
		t.Error("a root holds a private key")
	}
}

// A federation over TLS: one cluster CA, each datacenter's servers with
// a server certificate of their own datacenter. A secondary's leader gets
// its roots and intermediate from the primary's server-to-server port,
// presenting its server certificate; one with a certificate of another
// CA, or without TLS, fails clearly and stores nothing. On the primary's
// server port a server of dc2 gets neither dc3's intermediate nor the
// raw store, and a client certificate of the cluster CA gets nothing.
func TestSecondaryOverTLS(t *testing.T) {
	clusterCA, err := tlsutil.GenerateCA(tlsutil.CAOptions{Days: 2})
	if err != nil {
		t.Fatal(err)
	}
	serverOf := func(ca *tlsutil.KeyPair, dc string, kind tlsutil.Kind) *tlsutil.Configurator {
		t.Helper()
		cert, err := tlsutil.GenerateCert(ca, tlsutil.CertOptions{Kind: kind, Datacenter: dc, Days: 1})
		if err != nil {
			t.Fatal(err)
		}
		c, err := tlsutil.NewFromBundle(&tlsutil.DevBundle{CA: ca, Server: cert, Datacenter: dc, Domain: tlsutil.DefaultDomain})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	primary, _ := startDCWith(t, "dc1", "", serverOf(clusterCA, "dc1", tlsutil.KindServer))
	pRoots := activeRoots(t, "http://"+primary.HTTPAddr())

	good, _ := startDCWith(t, "dc2", "dc1", serverOf(clusterCA, "dc2", tlsutil.KindServer), primary.ServerAddr())
	var roots camodule.RootsBody
	eventually(t, "the secondary has the primary's root over the server port", func() bool {
		code, _ := get(t, "http://"+good.HTTPAddr()+"/v1/ca/roots", &roots)
		return code == http.StatusOK && roots.ActiveRootID == pRoots.ActiveRootID
	})
	eventually(t, "the secondary signs", func() bool { return managerStatus(t, "http://"+good.HTTPAddr())["state"] == ca.StateReady })
	leaf, _ := leafIn(t, "http://"+good.HTTPAddr(), pRoots.TrustDomain, "dc2", "web")
	verifyAsPeer(t, pRoots, leaf, time.Now())

	// A server of dc2, on the primary's server port: the federation
	// answers, but only for dc2; the rest of the port is not for it.
	ctx := context.Background()
	dc2 := serverOf(clusterCA, "dc2", tlsutil.KindServer)
	conn, err := grpc.NewClient(primary.ServerAddr(), grpc.WithTransportCredentials(dc2.DialServersOf("dc1")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fed := pbca.NewCAFederationClient(conn)
	if r, err := fed.Roots(ctx, &pbca.FederationRootsRequest{}); err != nil || len(r.GetRoots()) != 1 {
		t.Errorf("Roots for a server of dc2 = %v, %v; want the primary's root", r, err)
	}
	csr3, err := ca.NewIntermediateCSR(p256(t), pRoots.TrustDomain, "dc3")
	if err != nil {
		t.Fatal(err)
	}
	before := stored(t, primary.API())
	_, err = fed.SignIntermediate(ctx, &pbca.SignIntermediateRequest{CsrPem: string(csr3), Datacenter: "dc3"})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `a server of datacenter "dc2"`) {
		t.Errorf("dc3's intermediate for a server of dc2 = %v, want PermissionDenied naming dc2", err)
	}
	_, err = pbstorage.NewForwardingClient(conn).Read(ctx, &pbstorage.ReadRequest{Id: ca.SigningKeyID(ca.RootName(pRoots.ActiveRootID))})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `datacenter "dc1" only`) {
		t.Errorf("Forwarding.Read for a server of dc2 = %v, want PermissionDenied", err)
	}
	if after := stored(t, primary.API()); !sameMap(before, after) {
		t.Errorf("refusals wrote: %v -> %v", before, after)
	}
	// A client certificate of the same CA is no server's.
	clientCert, err := tlsutil.GenerateCert(clusterCA, tlsutil.CertOptions{Kind: tlsutil.KindClient, Datacenter: "dc2", Days: 1})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(clientCert.CertPEM, clientCert.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cconn, err := grpc.NewClient(primary.ServerAddr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair}, InsecureSkipVerify: true,
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer cconn.Close()
	if _, err := pbca.NewCAFederationClient(cconn).Roots(ctx, &pbca.FederationRootsRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("Roots for a client certificate = %v, want the handshake refused (Unavailable)", err)
	}

	other, err := tlsutil.GenerateCA(tlsutil.CAOptions{Days: 2})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		tls  *tlsutil.Configurator
		says string
	}{
		"another CA": {serverOf(other, "dc3", tlsutil.KindServer), "is not signed by the cluster CA"},
		"plaintext":  {nil, "needs its -tls-* files"},
	} {
		t.Run(name, func(t *testing.T) {
			srv, _ := startDCWith(t, "dc3", "dc1", tc.tls, primary.ServerAddr())
			var st map[string]any
			eventually(t, "the manager reports the failure", func() bool {
				st = managerStatus(t, "http://"+srv.HTTPAddr())
				return st["state"] == ca.StateFailed
			})
			t.Logf("last_error: %s", st["last_error"])
			if msg := st["last_error"].(string); !strings.Contains(msg, primary.ServerAddr()) || !strings.Contains(msg, tc.says) {
				t.Errorf("last_error %q does not name the address and say %q", msg, tc.says)
			}
			if r, k := count(t, srv.API(), ca.RootType), count(t, srv.API(), ca.SigningKeyType); r != 0 || k != 0 {
				t.Errorf("%d roots and %d keys stored, want none", r, k)
			}
		})
	}
}

// storedGenerations is the generation of every CA config, root and
// signing key: what changes when their data is written, not their status.
func storedGenerations(t *testing.T, api resource.API) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, typ := range []*pbresource.Type{ca.ConfigType, ca.RootType, ca.SigningKeyType} {
		list, err := api.List(resource.FromOperations(context.Background()), &pbresource.ListRequest{Type: typ, Tenancy: &pbresource.Tenancy{}})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list.GetResources() {
			out[typ.GetKind()+"/"+r.GetId().GetName()] = strconv.FormatUint(r.GetGeneration(), 10)
		}
	}
	return out
}
