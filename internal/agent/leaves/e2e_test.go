package leaves_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"trellis.dev/trellis/internal/agent/leaves"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/ca/camodule"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/testlog"
)

func startServer(t *testing.T) *server.Server {
	t.Helper()
	srv, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702",
		Logger: testlog.Logger(t), ShutdownTimeout: 10 * time.Second,
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
			t.Errorf("server: %v", err)
		}
	})
	return srv
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func roots(t *testing.T, base string) camodule.RootsBody {
	t.Helper()
	var body camodule.RootsBody
	resp, err := http.Get(base + "/v1/ca/roots")
	if err != nil {
		return body
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		_ = json.NewDecoder(resp.Body).Decode(&body)
	}
	return body
}

func poolOf(t *testing.T, rs ...camodule.RootBody) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	for _, r := range rs {
		certs, err := ca.ParseCerts([]byte(r.RootCert))
		if err != nil {
			t.Fatal(err)
		}
		p.AddCert(certs[0])
	}
	return p
}

// verifyAsPeer verifies cert (leaf and chain, as sent in a handshake)
// against pool for client authentication.
func verifyAsPeer(t *testing.T, what string, cert *tls.Certificate, pool *x509.CertPool) {
	t.Helper()
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		inter.AddCert(c)
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("%s does not verify: %v", what, err)
	}
}

// Against a real server: the cache follows its roots over gRPC, has it
// sign the agent's leaf and a service's, and they verify against the
// bundle /v1/ca/roots gives. After a rotation every leaf is signed again
// within the window, from the new chain: it verifies against the new root
// alone.
func TestCacheAgainstAServer(t *testing.T) {
	srv := startServer(t)
	base := "http://" + srv.HTTPAddr()
	var first camodule.RootsBody
	eventually(t, "an active root", func() bool {
		first = roots(t, base)
		return first.ActiveRootID != ""
	})

	servers := leaves.NewServers([]string{srv.GRPCAddr()}, testlog.Logger(t), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer servers.Close()
	c, err := leaves.New(leaves.Config{Signer: servers, Datacenter: "dc1", Instance: "i-1", ResignWindow: time.Second, Logger: testlog.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go servers.WatchRoots(ctx, c.SetRoots)
	go c.Run(ctx)
	web := leaves.ServiceKey("default", "web")
	if err := c.SetServices([]leaves.Key{web}); err != nil {
		t.Fatal(err)
	}
	agentCert, pool, err := c.Get(ctx, leaves.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	verifyAsPeer(t, "the agent leaf against /v1/ca/roots", agentCert, poolOf(t, first.Roots...))
	verifyAsPeer(t, "the agent leaf against the cache's pool", agentCert, pool)
	wantID := ca.AgentID{TrustDomain: first.TrustDomain, Datacenter: "dc1", Instance: "i-1"}
	if got, want := agentCert.Leaf.URIs[0].String(), wantID.String(); got != want {
		t.Fatalf("agent leaf names %s, want %s", got, want)
	}
	webCert, _, err := c.Get(ctx, web)
	if err != nil {
		t.Fatal(err)
	}
	verifyAsPeer(t, "web's leaf against /v1/ca/roots", webCert, poolOf(t, first.Roots...))

	body, _ := json.Marshal(map[string]any{"config": map[string]any{"rotation": 1}})
	req, _ := http.NewRequest(http.MethodPut, base+"/v1/ca/config", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/ca/config rotation = %s", resp.Status)
	}
	var rotated camodule.RootsBody
	eventually(t, "a new active root", func() bool {
		rotated = roots(t, base)
		return rotated.ActiveRootID != "" && rotated.ActiveRootID != first.ActiveRootID
	})
	newRoot := rotated.Roots[0] // the active one first
	eventually(t, "every leaf re-signed under the new root", func() bool {
		for _, in := range c.Leaves() {
			if in.RootID != rotated.ActiveRootID {
				return false
			}
		}
		return true
	})
	for _, k := range []leaves.Key{leaves.AgentKey, web} {
		cert, _, err := c.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if cert.Leaf.SerialNumber.Cmp(agentCert.Leaf.SerialNumber) == 0 || cert.Leaf.SerialNumber.Cmp(webCert.Leaf.SerialNumber) == 0 {
			t.Fatalf("%s: the leaf from before the rotation is still served", k)
		}
		verifyAsPeer(t, k.String()+"'s new leaf against the new root alone", cert, poolOf(t, newRoot))
		verifyAsPeer(t, k.String()+"'s new leaf against the old root alone (cross-signed)", cert, poolOf(t, first.Roots...))
	}
}
