package camodule_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
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

// activeRoots waits for the server's active root and returns the roots.
func activeRoots(t *testing.T, base string) camodule.RootsBody {
	t.Helper()
	var roots camodule.RootsBody
	eventually(t, "an active root", func() bool {
		code, _ := get(t, base+"/v1/ca/roots", &roots)
		return code == http.StatusOK && roots.ActiveRootID != ""
	})
	return roots
}

func p256(t *testing.T) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// newCSR makes a PEM CSR for key with the URI SANs and extensions given.
func newCSR(t *testing.T, key crypto.Signer, uris []string, exts ...pkix.Extension) string {
	t.Helper()
	tmpl := &x509.CertificateRequest{ExtraExtensions: exts}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// postSign sends a CSR to POST /v1/ca/sign.
func postSign(t *testing.T, base, csr string) (*http.Response, []byte) {
	t.Helper()
	body, err := json.Marshal(camodule.SignRequestBody{CSR: csr})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(base+"/v1/ca/sign", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// signOK signs csr, waiting while the server answers 503: its signer
// has not loaded the active root yet (the roots and keys reach it through
// its own watches, a moment after /v1/ca/roots shows the root).
func signOK(t *testing.T, base, csr string) camodule.SignBody {
	t.Helper()
	var resp *http.Response
	var b []byte
	eventually(t, "the signer holds the active root", func() bool {
		resp, b = postSign(t, base, csr)
		return resp.StatusCode != http.StatusServiceUnavailable
	})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/ca/sign = %d %s", resp.StatusCode, b)
	}
	var out camodule.SignBody
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func parseCerts(t *testing.T, p string) []*x509.Certificate {
	t.Helper()
	if p == "" {
		return nil
	}
	certs, err := ca.ParseCerts([]byte(p))
	if err != nil {
		t.Fatalf("%v:\n%s", err, p)
	}
	return certs
}

// verifyAsPeer verifies a leaf the way a TLS peer of the mesh does, with
// crypto/x509 alone: the roots of /v1/ca/roots as the trust pool, the
// chain the leaf came with as intermediates, for server and for client
// authentication.
func verifyAsPeer(t *testing.T, roots camodule.RootsBody, leaf camodule.SignBody, now time.Time) *x509.Certificate {
	t.Helper()
	pool := x509.NewCertPool()
	for _, r := range roots.Roots {
		for _, c := range parseCerts(t, r.RootCert) {
			pool.AddCert(c)
		}
	}
	inter := x509.NewCertPool()
	for _, c := range parseCerts(t, leaf.ChainPEM) {
		inter.AddCert(c)
	}
	certs := parseCerts(t, leaf.CertPEM)
	if len(certs) != 1 {
		t.Fatalf("cert_pem holds %d certificates, want the leaf alone", len(certs))
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Fatalf("the leaf does not verify for %v: %v", usage, err)
		}
	}
	return certs[0]
}

// stored is every version of the CA's stored resources: what a refused
// request must leave as it was.
func stored(t *testing.T, api resource.API) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, typ := range []*pbresource.Type{ca.ConfigType, ca.RootType, ca.SigningKeyType} {
		list, err := api.List(resource.FromOperations(context.Background()), &pbresource.ListRequest{Type: typ, Tenancy: &pbresource.Tenancy{}})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list.GetResources() {
			out[typ.GetKind()+"/"+r.GetId().GetName()] = r.GetVersion()
		}
	}
	return out
}

// A dev-like server signs a service's CSR and an agent's over HTTP and
// gRPC: each leaf names exactly the SPIFFE id asked for (and the
// service's DNS name), lives leaf_ttl, verifies with crypto/x509 against
// /v1/ca/roots, and two such leaves complete a mutual TLS handshake.
func TestSignLeaves(t *testing.T) {
	srv := start(t, nil)
	base := "http://" + srv.HTTPAddr()
	roots := activeRoots(t, base)
	if roots.Datacenter != "dc1" {
		t.Errorf("/v1/ca/roots names datacenter %q, want dc1", roots.Datacenter)
	}
	web := ca.ServiceID{TrustDomain: roots.TrustDomain, Namespace: "default", Datacenter: "dc1", Service: "web"}
	webKey := p256(t)
	before := time.Now()
	leaf := signOK(t, base, newCSR(t, webKey, []string{web.String()}))
	cert := verifyAsPeer(t, roots, leaf, time.Now())
	if len(cert.URIs) != 1 || cert.URIs[0].String() != web.String() || len(cert.DNSNames) != 1 || cert.DNSNames[0] != "web.svc.default.dc1.trellis" {
		t.Errorf("leaf names %v %v, want %s and web.svc.default.dc1.trellis", cert.URIs, cert.DNSNames, web)
	}
	if cert.IsCA || cert.SerialNumber.Text(16) != leaf.Serial || !cert.NotAfter.Equal(leaf.NotAfter) {
		t.Errorf("leaf: CA %v, serial %s (body %s), not after %v (body %v)", cert.IsCA, cert.SerialNumber.Text(16), leaf.Serial, cert.NotAfter, leaf.NotAfter)
	}
	if life := cert.NotAfter.Sub(before); life < ca.DefaultLeafTTL-time.Minute || life > ca.DefaultLeafTTL+time.Minute {
		t.Errorf("the leaf lives %v from its signing, want leaf_ttl %v", life, ca.DefaultLeafTTL)
	}
	if leaf.ChainPEM != "" {
		t.Errorf("chain_pem = %q, want none: the root signs directly before any rotation", leaf.ChainPEM)
	}
	if !cert.PublicKey.(*ecdsa.PublicKey).Equal(webKey.Public()) {
		t.Error("the leaf is not for the CSR's key")
	}

	// An agent's leaf, over the public gRPC port.
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pbca.NewCAServiceClient(conn)
	agent := ca.AgentID{TrustDomain: roots.TrustDomain, Datacenter: "dc1", Instance: "i-1"}
	agentKey := p256(t)
	resp, err := client.Sign(context.Background(), &pbca.SignRequest{CsrPem: newCSR(t, agentKey, []string{agent.String()})})
	if err != nil {
		t.Fatalf("gRPC Sign: %v", err)
	}
	agentLeaf := camodule.SignBody{CertPEM: resp.GetCertPem(), ChainPEM: resp.GetChainPem(), Serial: resp.GetSerial(), NotAfter: resp.GetNotAfter().AsTime()}
	agentCert := verifyAsPeer(t, roots, agentLeaf, time.Now())
	if len(agentCert.URIs) != 1 || agentCert.URIs[0].String() != agent.String() || len(agentCert.DNSNames) != 0 {
		t.Errorf("agent leaf names %v %v, want %s alone", agentCert.URIs, agentCert.DNSNames, agent)
	}
	if agentCert.SerialNumber.Text(16) != agentLeaf.Serial || agentLeaf.Serial == leaf.Serial {
		t.Errorf("serials %s and %s", leaf.Serial, agentLeaf.Serial)
	}
	_, err = client.Sign(context.Background(), &pbca.SignRequest{CsrPem: "nonsense"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "csr: it is not PEM") {
		t.Errorf("gRPC Sign of nonsense = %v, want InvalidArgument naming the csr", err)
	}
	// Intermediates are a matter between servers: not on the public port.
	_, err = pbca.NewCAFederationClient(conn).SignIntermediate(context.Background(), &pbca.SignIntermediateRequest{Datacenter: "evil"})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("SignIntermediate on the public port = %v, want Unimplemented", err)
	}

	// The two leaves, as a TLS server and client that trust the roots.
	mutualTLS(t, roots, leaf, webKey, agentLeaf, agentKey)
	verifyWithOpenSSL(t, roots, leaf)

	metrics := scrape(t, base)
	if !strings.Contains(metrics, "trellis_ca_signatures_total 2\n") || !strings.Contains(metrics, `trellis_ca_sign_refusals_total{reason="not_pem"} 1`) {
		t.Errorf("metrics do not count 2 signatures and 1 refusal:\n%s", grepLines(metrics, "trellis_ca_"))
	}
	m := regexp.MustCompile(`(?m)^trellis_ca_active_root_expiry_seconds (\S+)$`).FindStringSubmatch(metrics)
	if m == nil {
		t.Fatalf("no root expiry in the metrics:\n%s", grepLines(metrics, "trellis_ca_"))
	}
	if secs, _ := strconv.ParseFloat(m[1], 64); secs < (ca.DefaultRootTTL - time.Hour).Seconds() {
		t.Errorf("root expires in %s s, want about %v", m[1], ca.DefaultRootTTL)
	}
	if strings.Contains(metrics, "trellis_ca_signing_cert_expiry_seconds ") {
		t.Error("a signing-cert expiry is reported while the root signs itself")
	}
	if strings.Contains(metrics, "PRIVATE KEY") {
		t.Error("the metrics show a private key")
	}
}

// mutualTLS runs a TLS 1.3 handshake between a server holding leaf a and a
// client holding leaf b, each trusting only the CA's roots and asking the
// other for its certificate.
func mutualTLS(t *testing.T, roots camodule.RootsBody, a camodule.SignBody, aKey crypto.Signer, b camodule.SignBody, bKey crypto.Signer) {
	t.Helper()
	pool := x509.NewCertPool()
	for _, r := range roots.Roots {
		pool.AppendCertsFromPEM([]byte(r.RootCert))
	}
	pair := func(leaf camodule.SignBody, key crypto.Signer) tls.Certificate {
		var c tls.Certificate
		for _, x := range append(parseCerts(t, leaf.CertPEM), parseCerts(t, leaf.ChainPEM)...) {
			c.Certificate = append(c.Certificate, x.Raw)
		}
		c.PrivateKey = key
		return c
	}
	sConn, cConn := net.Pipe()
	defer sConn.Close()
	defer cConn.Close()
	srv := tls.Server(sConn, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair(a, aKey)}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})
	// The client checks the server's SPIFFE id rather than a host name.
	cli := tls.Client(cConn, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair(b, bKey)}, RootCAs: pool, ServerName: "web.svc.default.dc1.trellis"})
	done := make(chan error, 1)
	go func() { done <- srv.Handshake() }()
	if err := cli.Handshake(); err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("server handshake: %v", err)
	}
	peer := srv.ConnectionState().PeerCertificates
	if len(peer) == 0 || len(peer[0].URIs) != 1 || !strings.Contains(peer[0].URIs[0].String(), "/agent/client/") {
		t.Errorf("the server saw the client as %v", peer)
	}
}

// verifyWithOpenSSL checks a leaf with another X.509 stack than Go's, as an
// operator would: openssl verify -CAfile roots.pem. Skipped without
// openssl.
func verifyWithOpenSSL(t *testing.T, roots camodule.RootsBody, leaf camodule.SignBody) {
	t.Helper()
	bin, err := exec.LookPath("openssl")
	if err != nil {
		t.Log("openssl is not installed: not checked with it")
		return
	}
	dir := t.TempDir()
	var bundle strings.Builder
	for _, r := range roots.Roots {
		bundle.WriteString(r.RootCert)
	}
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	args := []string{"verify", "-x509_strict", "-CAfile", write("roots.pem", bundle.String())}
	if leaf.ChainPEM != "" {
		args = append(args, "-untrusted", write("chain.pem", leaf.ChainPEM))
	}
	args = append(args, write("leaf.pem", leaf.CertPEM))
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Errorf("openssl verify: %v\n%s", err, out)
	}
}

func scrape(t *testing.T, base string) string {
	t.Helper()
	code, body := get(t, base+"/v1/metrics", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/metrics = %d", code)
	}
	return body
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Every CSR of the bad-input list is refused through the route,
// 400 with the reason and the field, counted by reason, and nothing of
// the stored CA changes.
func TestSignRefusesBadCSRs(t *testing.T) {
	srv := start(t, nil)
	base := "http://" + srv.HTTPAddr()
	roots := activeRoots(t, base)
	td := roots.TrustDomain
	svc := func(td, dc string) string {
		return ca.ServiceID{TrustDomain: td, Namespace: "default", Datacenter: dc, Service: "web"}.String()
	}
	key := p256(t)
	tampered := func() string {
		block, _ := pem.Decode([]byte(newCSR(t, key, []string{svc(td, "dc1")})))
		block.Bytes[len(block.Bytes)-1] ^= 0x01
		return string(pem.EncodeToMemory(block))
	}
	caExt := func() pkix.Extension {
		v, err := asn1.Marshal(struct{ IsCA bool }{true})
		if err != nil {
			t.Fatal(err)
		}
		return pkix.Extension{Id: asn1.ObjectIdentifier{2, 5, 29, 19}, Critical: true, Value: v}
	}
	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, csr, reason, field string
	}{
		{"not PEM", "hello", ca.ReasonNotPEM, "csr"},
		{"empty", "", ca.ReasonNotPEM, "csr"},
		{"not a CSR", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2}})), ca.ReasonNotCSR, "csr"},
		{"bad signature", tampered(), ca.ReasonBadSignature, "csr"},
		{"two URI SANs", newCSR(t, key, []string{svc(td, "dc1"), ca.AgentID{TrustDomain: td, Datacenter: "dc1", Instance: "i"}.String()}), ca.ReasonURISANCount, "csr.uri_san"},
		{"foreign trust domain", newCSR(t, key, []string{svc("other.trellis", "dc1")}), ca.ReasonTrustDomain, "csr.uri_san"},
		{"other datacenter", newCSR(t, key, []string{svc(td, "dc2")}), ca.ReasonDatacenter, "csr.uri_san"},
		{"CA request", newCSR(t, key, []string{svc(td, "dc1")}, caExt()), ca.ReasonCARequested, "csr.extensions"},
		{"RSA 1024", newCSR(t, rsa1024, []string{svc(td, "dc1")}), ca.ReasonKeyType, "csr.public_key"},
	}
	before := stored(t, srv.API())
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, b := postSign(t, base, c.csr)
			var r camodule.RefusalBody
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatalf("%d %s: %v", resp.StatusCode, b, err)
			}
			if resp.StatusCode != http.StatusBadRequest || r.Reason != c.reason || r.Field != c.field || r.Code != "invalid_argument" || !strings.HasPrefix(r.Error, c.field+": ") {
				t.Errorf("= %d %+v, want 400 %s naming %s", resp.StatusCode, r, c.reason, c.field)
			}
			if strings.Contains(string(b), "PRIVATE KEY") {
				t.Error("the refusal shows a key")
			}
		})
	}
	// Not JSON, an unknown field: the API's usual refusals, never a 500.
	for _, body := range []string{`{"csr": 1}`, `{"cert": "x"}`, `nope`} {
		resp, err := http.Post(base+"/v1/ca/sign", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("POST %s = %d, want 400", body, resp.StatusCode)
		}
	}
	if after := stored(t, srv.API()); !equalMaps(before, after) {
		t.Errorf("refusals changed the stored CA: %v, then %v", before, after)
	}
	metrics := scrape(t, base)
	for _, c := range cases {
		if c.name == "empty" || c.name == "not PEM" {
			continue
		}
		if !strings.Contains(metrics, `trellis_ca_sign_refusals_total{reason="`+c.reason+`"} 1`) {
			t.Errorf("refusal %s is not counted once:\n%s", c.reason, grepLines(metrics, "trellis_ca_sign_refusals"))
		}
	}
	if !strings.Contains(metrics, `trellis_ca_sign_refusals_total{reason="not_pem"} 2`) || strings.Contains(metrics, "trellis_ca_signatures_total 1") {
		t.Errorf("metrics:\n%s", grepLines(metrics, "trellis_ca_"))
	}
}

func equalMaps(a, b map[string]string) bool {
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

// A server whose CA has no root yet answers Unavailable, saying so,
// over HTTP (503) and gRPC.
func TestSignBeforeTheCAHasARoot(t *testing.T) {
	// The CA's types and its signer, without the manager: no root is ever
	// made.
	srv := start(t, []module.Module{core.Module(), signerOnly{camodule.New(camodule.Config{})}})
	base := "http://" + srv.HTTPAddr()
	key := p256(t)
	csr := newCSR(t, key, []string{"spiffe://x.trellis/ns/default/dc/dc1/svc/web"})
	resp, b := postSign(t, base, csr)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "no active root yet") {
		t.Errorf("POST /v1/ca/sign = %d %s, want 503 saying there is no active root yet", resp.StatusCode, b)
	}
}

// signerOnly is the CA's module without its manager's controller.
type signerOnly struct{ module.Module }

func (s signerOnly) Setup(d module.Deps) (module.Parts, error) {
	p, err := s.Module.Setup(d)
	p.Controllers = nil
	return p, err
}

// Over csr_max_per_second the route answers 429 with a Retry-After and
// gRPC ResourceExhausted with a retry-after trailer, counted; nothing
// waits. The server's clock stands still, so the bucket never refills.
func TestSignRateLimit(t *testing.T) {
	frozen := time.Now()
	srv := start(t, []module.Module{core.Module(), camodule.New(camodule.Config{Now: func() time.Time { return frozen }})})
	base := "http://" + srv.HTTPAddr()
	roots := activeRoots(t, base)
	setLimits(t, srv, 2, 0)
	csr := newCSR(t, p256(t), []string{ca.ServiceID{TrustDomain: roots.TrustDomain, Namespace: "default", Datacenter: "dc1", Service: "web"}.String()})
	var resp *http.Response
	var b []byte
	eventually(t, "a 429", func() bool {
		resp, b = postSign(t, base, csr)
		return resp.StatusCode == http.StatusTooManyRequests
	})
	var body camodule.RateLimitedBody
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Retry-After") != "1" || body.Code != "too_many_requests" || body.Limit != camodule.LimitRate || !strings.Contains(body.Error, "csr_max_per_second") {
		t.Errorf("429: Retry-After %q, body %+v", resp.Header.Get("Retry-After"), body)
	}
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var trailer metadata.MD
	_, err = pbca.NewCAServiceClient(conn).Sign(context.Background(), &pbca.SignRequest{CsrPem: csr}, grpc.Trailer(&trailer))
	if status.Code(err) != codes.ResourceExhausted || len(trailer.Get(camodule.RetryAfterKey)) != 1 || trailer.Get(camodule.RetryAfterKey)[0] != "1" {
		t.Errorf("gRPC Sign = %v with trailer %v, want ResourceExhausted and retry-after 1", err, trailer)
	}
	if m := scrape(t, base); !regexp.MustCompile(`trellis_ca_sign_rate_limited_total\{limit="rate"\} [1-9]`).MatchString(m) {
		t.Errorf("rate-limited requests are not counted:\n%s", grepLines(m, "trellis_ca_"))
	}
}

// setLimits writes the CAConfig's signing limits as an operator would
// have (the configuration route is another part's): in process, as the
// CA's own operations do.
func setLimits(t *testing.T, srv *server.Server, perSecond float64, concurrent int32) {
	t.Helper()
	ctx := resource.FromOperations(context.Background())
	var res *pbresource.Resource
	eventually(t, "the CA configuration", func() bool {
		r, err := srv.API().Read(ctx, &pbresource.ReadRequest{Id: ca.ConfigID()})
		res = r.GetResource()
		return err == nil
	})
	cfg, err := resource.DecodeData[*pbca.CAConfig](res)
	if err != nil {
		t.Fatal(err)
	}
	cfg.CsrMaxPerSecond, cfg.CsrMaxConcurrent = perSecond, concurrent
	data, err := anypb.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.API().Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: res.GetId(), Version: res.GetVersion(), Data: data}}); err != nil {
		t.Fatal(err)
	}
}

// After a rotation the signer moves to the new root by itself: its
// leaves carry the cross-signed root in chain_pem, and verify against a
// pool of the old root alone, of the new root alone, and with openssl
// against the bundle. Signing never stops meanwhile: every answer during
// the switch verifies against the roots.
func TestSigningThroughARotation(t *testing.T) {
	srv := start(t, nil)
	base := "http://" + srv.HTTPAddr()
	first := activeRoots(t, base)
	web := ca.ServiceID{TrustDomain: first.TrustDomain, Namespace: "default", Datacenter: "dc1", Service: "web"}
	key := p256(t)
	csr := newCSR(t, key, []string{web.String()})
	before := signOK(t, base, csr)
	if code, body := put(t, base+"/v1/ca/config", map[string]any{"config": map[string]any{"rotation": 1}}); code != http.StatusOK {
		t.Fatalf("PUT rotation 1 = %d %s", code, body)
	}
	var after camodule.SignBody
	var roots camodule.RootsBody
	eventually(t, "a leaf of the new root", func() bool {
		after = signOK(t, base, csr)
		get(t, base+"/v1/ca/roots", &roots)
		verifyAsPeer(t, roots, after, time.Now())
		return after.ChainPEM != ""
	})
	if len(roots.Roots) != 2 {
		t.Fatalf("%d roots after the rotation, want 2", len(roots.Roots))
	}
	newRoot, oldRoot := roots.Roots[0], roots.Roots[1]
	if !newRoot.Active || after.ChainPEM != newRoot.IntermediateCerts[0] {
		t.Fatalf("chain_pem is not the new root's cross-signed certificate:\n%s", after.ChainPEM)
	}
	only := func(r camodule.RootBody) camodule.RootsBody { return camodule.RootsBody{Roots: []camodule.RootBody{r}} }
	verifyAsPeer(t, only(oldRoot), after, time.Now())
	verifyAsPeer(t, only(newRoot), after, time.Now())
	verifyAsPeer(t, roots, before, time.Now())
	verifyWithOpenSSL(t, roots, after)
	verifyWithOpenSSL(t, only(oldRoot), after)
}
