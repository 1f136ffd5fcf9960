package camodule_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pbca "trellis.dev/trellis/api/ca/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/ca/camodule"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/tlsutil"
)

// A server identity is never signed on request: POST /v1/ca/sign and the
// public gRPC Sign refuse it, naming the reason and the field, whatever
// its trust domain or datacenter, so that no agent can hold a server's
// identity.
func TestSignRefusesServerIdentities(t *testing.T) {
	srv := start(t, nil)
	base := "http://" + srv.HTTPAddr()
	td := activeRoots(t, base).TrustDomain
	// The signer loads the root a moment after /v1/ca/roots shows it;
	// until then every request is 503, the refusals below included.
	signOK(t, base, newCSR(t, p256(t), []string{"spiffe://" + td + "/ns/default/dc/dc1/svc/web"}))
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pbca.NewCAServiceClient(conn)
	key := p256(t)
	cases := []struct {
		name string
		id   ca.ServerID
	}{
		{"this datacenter's", ca.ServerID{TrustDomain: td, Datacenter: "dc1", Server: "s-1"}},
		{"another datacenter's", ca.ServerID{TrustDomain: td, Datacenter: "dc2", Server: "s-1"}},
		{"another trust domain's", ca.ServerID{TrustDomain: "other.trellis", Datacenter: "dc1", Server: "s-1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			csr := newCSR(t, key, []string{c.id.String()})
			resp, b := postSign(t, base, csr)
			var r camodule.RefusalBody
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatalf("%d %s: %v", resp.StatusCode, b, err)
			}
			if resp.StatusCode != http.StatusBadRequest || r.Reason != ca.ReasonServerID || r.Field != "csr.uri_san" || !strings.Contains(r.Error, "a server's identity") {
				t.Errorf("POST /v1/ca/sign = %d %+v, want 400 %s naming csr.uri_san", resp.StatusCode, r, ca.ReasonServerID)
			}
			_, err := client.Sign(context.Background(), &pbca.SignRequest{CsrPem: csr})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "csr.uri_san: "+c.id.String()+" is a server's identity") {
				t.Errorf("gRPC Sign = %v, want InvalidArgument naming csr.uri_san", err)
			}
		})
	}
	if m := scrape(t, base); !strings.Contains(m, `trellis_ca_sign_refusals_total{reason="server_id"} 6`) {
		t.Errorf("the refusals are not counted by reason:\n%s", grepLines(m, "trellis_ca_sign_refusals"))
	}
}

// startTLS runs an in-memory server of the core and CA modules with TLS
// (a dev bundle's certificates) until the test ends, and returns it with
// its TLS.
func startTLS(t *testing.T, cfg camodule.Config) (*server.Server, *tlsutil.Configurator) {
	t.Helper()
	b, err := tlsutil.NewDevBundle("", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := tlsutil.NewFromBundle(b)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702", TLS: tc,
		Modules: []module.Module{core.Module(), camodule.New(cfg)}, ShutdownTimeout: 10 * time.Second,
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
	return srv, tc
}

// certsOf parses a tls.Certificate's chain, leaf first.
func certsOf(t *testing.T, cert *tls.Certificate) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for _, der := range cert.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// A server with TLS signs itself a leaf of its server identity once its
// CA has a root, hands it to its TLS, reports its expiry, and signs a
// new one, chaining to the new root, after a rotation.
func TestServerSignsItsOwnLeaf(t *testing.T) {
	srv, tc := startTLS(t, camodule.Config{ServerResignWindow: time.Second})
	base := "http://" + srv.HTTPAddr()
	roots := activeRoots(t, base)
	var first *tls.Certificate
	eventually(t, "the server's own leaf", func() bool {
		first = tc.ConnectServerCertificate()
		return first != nil
	})
	chain := certsOf(t, first)
	id, err := ca.VerifyPeer(chain, rootCerts(t, roots.Roots...), time.Now())
	if err != nil {
		t.Fatalf("the server's leaf does not verify against /v1/ca/roots: %v", err)
	}
	sid, ok := id.(ca.ServerID)
	if !ok || sid.TrustDomain != roots.TrustDomain || sid.Datacenter != "dc1" || sid.Server == "" {
		t.Fatalf("the server's leaf names %v", id)
	}
	if !slices.Equal(chain[0].DNSNames, []string{"server.dc1.trellis", "server.dc1.connect.trellis"}) {
		t.Errorf("DNS names %v", chain[0].DNSNames)
	}
	m := regexp.MustCompile(`(?m)^trellis_ca_server_cert_expiry_seconds (\S+)$`).FindStringSubmatch(scrape(t, base))
	if m == nil {
		t.Fatal("no server leaf expiry in the metrics")
	}
	if secs, _ := strconv.ParseFloat(m[1], 64); secs < (ca.DefaultLeafTTL-time.Hour).Seconds() || secs > ca.DefaultLeafTTL.Seconds() {
		t.Errorf("the server leaf expires in %s s, want about leaf_ttl %v", m[1], ca.DefaultLeafTTL)
	}

	if code, body := put(t, base+"/v1/ca/config", map[string]any{"config": map[string]any{"rotation": 1}}); code != http.StatusOK {
		t.Fatalf("PUT rotation 1 = %d %s", code, body)
	}
	var rotated camodule.RootsBody
	eventually(t, "a new active root", func() bool {
		get(t, base+"/v1/ca/roots", &rotated)
		return rotated.ActiveRootID != roots.ActiveRootID && rotated.ActiveRootID != ""
	})
	var second *tls.Certificate
	eventually(t, "the server's leaf signed under the new root", func() bool {
		second = tc.ConnectServerCertificate()
		return second != first
	})
	newRoot, oldRoot := parseCerts(t, rotated.Roots[0].RootCert), parseCerts(t, rotated.Roots[1].RootCert)
	for what, pool := range map[string][]*x509.Certificate{"the new root": newRoot, "the old root": oldRoot} {
		if _, err := ca.VerifyPeer(certsOf(t, second), pool, time.Now()); err != nil {
			t.Errorf("the server's new leaf does not verify against %s alone: %v", what, err)
		}
	}
	if _, err := ca.VerifyPeer(certsOf(t, first), newRoot, time.Now()); err == nil {
		t.Error("the server's first leaf verifies against the new root alone: it was not of the old root")
	}
}
