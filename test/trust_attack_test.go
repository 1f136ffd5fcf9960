package test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
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
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbcluster "trellis.dev/trellis/api/cluster/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbstorage "trellis.dev/trellis/api/storage/v1"
	"trellis.dev/trellis/internal/testcluster"
)

// TestTrustAttackChainIsRefused plays, against a real TLS federation (a
// three-server primary dc1 and a one-server secondary dc2, set up as
// docs/tls.md and docs/ca.md say), the chain of issue 23 by which a client
// made itself a server, and checks that every step is refused:
//
//  1. CAFederation.SignIntermediate (and the old CAService method) is not
//     served on any public gRPC port: Unimplemented.
//  2. The server-to-server port takes no caller without a server's
//     certificate; a server of dc2 (the secondary's own certificate) gets
//     dc2's intermediate there and nothing else: not dc3's nor a new
//     datacenter's, not the raw store, not membership.
//  3. A server leaf forged under that intermediate (a CA certificate that
//     chains to the root) is refused by every server port and every Raft
//     port of dc1, and by dc2's server port (dc2 runs with
//     -connect-server-certs=false, which changes nothing of it).
//  4. The secondary's server certificate is refused by every Raft port of
//     the primary.
//
// The federation itself works throughout: dc2 signs leaves that verify
// against the primary's roots, and dc1's servers link to each other on
// their Connect leaves.
func TestTrustAttackChainIsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	t.Parallel() // a cluster test without a short TTL: see the package doc
	ctx := context.Background()
	dir := t.TempDir()
	bin := trellisBinary(t)
	pki := filepath.Join(dir, "pki")
	if err := os.Mkdir(pki, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"tls", "ca", "create"},
		{"tls", "cert", "create", "-server", "-dc", "dc1"},
		{"tls", "cert", "create", "-server", "-dc", "dc2"},
		{"tls", "cert", "create", "-client", "-dc", "dc1"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = pki
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("trellis %v: %v\n%s", args, err, out)
		}
	}
	file := func(name string) string { return filepath.Join(pki, name) }
	tlsFlags := func(dc string) []string {
		return []string{"-tls-ca-file", file("trellis-agent-ca.pem"),
			"-tls-cert-file", file(dc + "-server-trellis-0.pem"), "-tls-key-file", file(dc + "-server-trellis-0-key.pem")}
	}
	var clusters []*testcluster.Cluster
	t.Cleanup(func() {
		for _, c := range clusters {
			c.Stop()
			if t.Failed() {
				for _, m := range c.Members {
					b, _ := os.ReadFile(m.LogPath)
					t.Logf("--- %s log ---\n%s", m.LogPath, tail(b, 3000))
				}
			}
		}
	})
	start := func(name string, servers int, extra ...string) *testcluster.Cluster {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		c, err := testcluster.Start(ctx, testcluster.Options{Bin: bin, Dir: d, Servers: servers, Extra: extra})
		if err != nil {
			t.Fatal(err)
		}
		clusters = append(clusters, c)
		return c
	}

	dc1 := start("dc1", 3, tlsFlags("dc1")...)
	var primary rootsAnswer
	waitCA(t, "the primary's root on every server", func() bool {
		for _, m := range dc1.Members {
			if primary = caRoots(t, m); primary.ActiveRootID == "" {
				return false
			}
		}
		return true
	})
	var primaryServerAddrs []string
	for _, m := range dc1.Members {
		primaryServerAddrs = append(primaryServerAddrs, m.ServerAddr)
	}
	dc2 := start("dc2", 1, append(tlsFlags("dc2"), "-datacenter", "dc2", "-primary-datacenter", "dc1",
		"-primary-address", strings.Join(primaryServerAddrs, ","), "-connect-server-certs=false")...)
	secondary := dc2.Members[0]
	waitCA(t, "dc2 signs under the primary's root (it federated over the server port)", func() bool {
		r := caRoots(t, secondary)
		if r.ActiveRootID != primary.ActiveRootID || r.Datacenter != "dc2" {
			return false
		}
		leaf, code := signOn(t, secondary, dcServiceCSR(t, primary.TrustDomain, "dc2", "web"))
		if code != http.StatusOK {
			return false
		}
		verifyLeaf(t, primary, leaf)
		return leaf.ChainPEM != ""
	})
	// dc1's servers move their links onto their Connect leaves: the check
	// of a leaf's issuer takes their own.
	waitCA(t, "dc1's server links on Connect leaves", func() bool {
		for _, m := range dc1.Members {
			if serverLinks(t, m, "connect") == 0 {
				return false
			}
		}
		return true
	})

	caPool := x509.NewCertPool()
	caPEM, err := os.ReadFile(file("trellis-agent-ca.pem"))
	if err != nil || !caPool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("the cluster CA: %v", err)
	}
	pair := func(name string) *tls.Certificate {
		c, err := tls.LoadX509KeyPair(file(name+".pem"), file(name+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	dc1Server, dc2Server, dc1Client := pair("dc1-server-trellis-0"), pair("dc2-server-trellis-0"), pair("dc1-client-trellis-0")
	leader, err := dc1.WaitLeader(ctx, dc1.Members)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	refused := func(step string, err error, code codes.Code, says string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: served, want it refused", step)
			return
		}
		if status.Code(err) != code || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v, want %s saying %q", step, err, code, says)
			return
		}
		t.Logf("refused: %s: %v", step, err)
	}

	// 1. No intermediate on the public port, with no certificate and no
	// token, under the service's new name or its old one.
	for _, m := range dc1.Members {
		conn := dialAs(t, m.GRPCAddr, "server.dc1.trellis", caPool, nil)
		_, err := pbca.NewCAFederationClient(conn).SignIntermediate(cctx, &pbca.SignIntermediateRequest{CsrPem: "x", Datacenter: "evil"})
		refused("1. CAFederation.SignIntermediate on the public port of "+m.Name, err, codes.Unimplemented, "unknown service")
		err = conn.Invoke(cctx, "/trellis.ca.v1.CAService/SignIntermediate", &pbca.SignIntermediateRequest{CsrPem: "x", Datacenter: "evil"}, &pbca.SignIntermediateResponse{})
		refused("1. CAService.SignIntermediate on the public port of "+m.Name, err, codes.Unimplemented, "unknown method")
	}

	// 2. The server-to-server port: nothing without a server's
	// certificate; a server of dc1 (the control) is served.
	info := func(addr, name string, cert *tls.Certificate) error {
		_, err := pbcluster.NewClusterClient(dialAs(t, addr, name, caPool, cert)).Info(cctx, &pbcluster.InfoRequest{})
		return err
	}
	if err := info(leader.ServerAddr, "server.dc1.trellis", dc1Server); err != nil {
		t.Fatalf("the control, a server of dc1 on its server port: %v", err)
	}
	refused("2. no certificate, Cluster.Info on the server port", info(leader.ServerAddr, "server.dc1.trellis", nil), codes.Unavailable, "")
	refusedTLS(t, "2. no certificate on the server port", leader.ServerAddr, &tls.Certificate{}, "remote error: tls: certificate required")
	refused("2. a client certificate of the cluster CA, Cluster.Info on the server port", info(leader.ServerAddr, "server.dc1.trellis", dc1Client), codes.Unavailable, "")
	refusedTLS(t, "2. a client certificate of the cluster CA on the server port", leader.ServerAddr, dc1Client, badCertificate)

	// A server of dc2 on the primary's server port: dc2's intermediate,
	// nothing else.
	asDC2 := dialAs(t, leader.ServerAddr, "server.dc1.trellis", caPool, dc2Server)
	fed := pbca.NewCAFederationClient(asDC2)
	for _, dc := range []string{"dc3", "evil"} {
		_, csr := intermediateCSR(t, primary.TrustDomain)
		_, err := fed.SignIntermediate(cctx, &pbca.SignIntermediateRequest{CsrPem: csr, Datacenter: dc})
		refused("2. a server of dc2 asking for the intermediate of "+dc, err, codes.PermissionDenied, `a server of datacenter "dc2"`)
	}
	_, err = pbstorage.NewForwardingClient(asDC2).Read(cctx, &pbstorage.ReadRequest{Id: &pbresource.ID{
		Type: &pbresource.Type{Group: "ca", GroupVersion: "v1", Kind: "CASigningKey"}, Tenancy: &pbresource.Tenancy{}, Name: primaryRootName(primary)}})
	refused("2. a server of dc2 reading the root's signing key raw", err, codes.PermissionDenied, `served to the servers of datacenter "dc1" only`)
	_, err = pbstorage.NewForwardingClient(asDC2).Apply(cctx, &pbstorage.ApplyRequest{})
	refused("2. a server of dc2 writing raw", err, codes.PermissionDenied, `served to the servers of datacenter "dc1" only`)
	_, err = pbcluster.NewClusterClient(asDC2).Join(cctx, &pbcluster.JoinRequest{})
	refused("2. a server of dc2 joining dc1's Raft", err, codes.PermissionDenied, `served to the servers of datacenter "dc1" only`)
	interKey, csr := intermediateCSR(t, primary.TrustDomain)
	resp, err := fed.SignIntermediate(cctx, &pbca.SignIntermediateRequest{CsrPem: csr, Datacenter: "dc2"})
	if err != nil {
		t.Fatalf("a server of dc2 asking for dc2's intermediate: %v", err)
	}
	inter := parseCert(t, resp.GetCertPem())
	if !inter.IsCA || len(inter.PermittedURIDomains) != 1 || inter.PermittedURIDomains[0] != primary.TrustDomain {
		t.Errorf("the intermediate: CA %v, permitted URI domains %q; want a CA constrained to %s", inter.IsCA, inter.PermittedURIDomains, primary.TrustDomain)
	}

	// 3. Server leaves forged under that intermediate, which chains to the
	// root: refused by every server port and Raft port of dc1, and by
	// dc2's server port (it is not dc2's own intermediate).
	forgedDC1 := forgeServerLeaf(t, inter, interKey, primary.TrustDomain, "dc1")
	forgedDC2 := forgeServerLeaf(t, inter, interKey, primary.TrustDomain, "dc2")
	if err := verifyChain(forgedDC1, primary); err != nil {
		t.Fatalf("the forged leaf does not even chain to the root (the test would prove nothing): %v", err)
	}
	for _, m := range dc1.Members {
		refused("3. a forged dc1 server leaf calling Cluster.Info on the server port of "+m.Name, info(m.ServerAddr, "server.dc1.trellis", forgedDC1), codes.Unavailable, "")
		refusedTLS(t, "3. a forged dc1 server leaf on the server port of "+m.Name, m.ServerAddr, forgedDC1, badCertificate)
		refusedTLS(t, "3. a forged dc2 server leaf on the server port of "+m.Name, m.ServerAddr, forgedDC2, badCertificate)
		refusedTLS(t, "3. a forged dc1 server leaf on the Raft port of "+m.Name, m.RaftAddr, forgedDC1, badCertificate)
	}
	refusedTLS(t, "3. a forged dc2 server leaf on the server port of dc2", secondary.ServerAddr, forgedDC2, badCertificate)
	refusedTLS(t, "3. a forged dc2 server leaf on the Raft port of dc2", secondary.RaftAddr, forgedDC2, badCertificate)
	// The control: a server of dc1 is answered on the server port at once
	// (the gRPC server's first frame).
	if err := portRead(t, leader.ServerAddr, dc1Server); err != nil {
		t.Errorf("the control, a server of dc1 on the server port of %s: %v", leader.Name, err)
	}

	// 4. The secondary's server certificate on the primary's Raft ports.
	for _, m := range dc1.Members {
		refusedTLS(t, "4. the secondary's server certificate on the Raft port of "+m.Name, m.RaftAddr, dc2Server, badCertificate)
	}
	// The control: the same dial with a server of dc1 keeps the link.
	acceptedRaft(t, "a server of dc1 on the Raft port of "+leader.Name, leader.RaftAddr, dc1Server)

	// Nothing moved: one root, the same, and dc2 still signs.
	if r := caRoots(t, leader); r.ActiveRootID != primary.ActiveRootID || len(r.Roots) != 1 {
		t.Errorf("the primary's roots after the attack: active %s of %d, want %s alone", r.ActiveRootID, len(r.Roots), primary.ActiveRootID)
	}
	if _, code := signOn(t, secondary, dcServiceCSR(t, primary.TrustDomain, "dc2", "api")); code != http.StatusOK {
		t.Errorf("dc2 signs no more: %d", code)
	}
	// The servers say why, in their logs.
	for _, m := range append(dc1.Members, secondary) {
		logs, _ := os.ReadFile(m.LogPath)
		for _, line := range regexp.MustCompile(`(?m)^.*peer refused.*$`).FindAll(logs, -1) {
			t.Logf("%s logged: %s", m.Name, line)
		}
	}
}

// dialAs dials addr over TLS, checking the server's certificate against
// the cluster CA for name, and presenting cert whatever the server asks
// for (nil: none), as an attacker's client would.
func dialAs(t *testing.T, addr, name string, pool *x509.CertPool, cert *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(presentingTo(name, pool, cert))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// presentingTo is a client's tls.Config that presents cert (or none)
// even when the server names CAs that did not sign it: Go's own choice
// would send nothing, and the test would not try the certificate.
func presentingTo(name string, pool *x509.CertPool, cert *tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: name,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if cert == nil {
				return &tls.Certificate{}, nil
			}
			return cert, nil
		},
	}
}

// portRead dials a server port presenting cert and reads: a server that
// refuses the certificate sends its alert at once; one that takes it
// sends its first frame (the server RPCs) or waits for the Raft RPC the
// dialer never sends (Raft: a timeout).
func portRead(t *testing.T, addr string, cert *tls.Certificate) error {
	t.Helper()
	d := net.Dialer{Timeout: 10 * time.Second}
	conn, err := tls.DialWithDialer(&d, "tcp", addr, &tls.Config{
		// h2: the gRPC server closes a link that does not offer it.
		MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, NextProtos: []string{"h2"},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil },
	})
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	return err
}

// badCertificate is the alert a server port answers a certificate it
// refuses with (the reason is in its log).
const badCertificate = "remote error: tls: bad certificate"

// refusedTLS checks that a server port refuses cert with alert.
func refusedTLS(t *testing.T, step, addr string, cert *tls.Certificate, alert string) {
	t.Helper()
	err := portRead(t, addr, cert)
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) || !strings.Contains(err.Error(), alert) {
		t.Errorf("%s: %v, want the handshake refused", step, err)
		return
	}
	t.Logf("refused: %s: %v", step, err)
}

func acceptedRaft(t *testing.T, step, addr string, cert *tls.Certificate) {
	t.Helper()
	var ne net.Error
	if err := portRead(t, addr, cert); !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("the control, %s: %v, want the link kept open", step, err)
	}
}

// serverLinks reads trellis_tls_server_links{peer_cert=kind} of m.
func serverLinks(t *testing.T, m *testcluster.Member, kind string) int {
	t.Helper()
	re := regexp.MustCompile(`(?m)^trellis_tls_server_links\{peer_cert="` + kind + `"\} (\d+)$`)
	got := re.FindStringSubmatch(metricsOf(t, m))
	if got == nil {
		return 0
	}
	n, _ := strconv.Atoi(got[1])
	return n
}

// intermediateCSR makes a key and the CSR a secondary sends for its
// intermediate: a CA request naming the trust domain.
func intermediateCSR(t *testing.T, td string) (crypto.Signer, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	bc, err := asn1.Marshal(struct {
		IsCA bool `asn1:"optional"`
	}{IsCA: true})
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:         pkix.Name{CommonName: "not a secondary"},
		URIs:            []*url.URL{{Scheme: "spiffe", Host: td}},
		ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 19}, Critical: true, Value: bc}},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return key, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// forgeServerLeaf signs, with the intermediate's key, a leaf that looks
// in every way like a server leaf of dc: its SPIFFE id, its names, both
// usages, and the intermediate in its chain.
func forgeServerLeaf(t *testing.T, inter *x509.Certificate, interKey crypto.Signer, td, dc string) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := url.Parse(fmt.Sprintf("spiffe://%s/server/dc/%s/id/evil", td, dc))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: "evil"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{id},
		DNSNames:    []string{"server." + dc + ".trellis", "server." + dc + ".connect.trellis"},
	}, inter, key.Public(), interKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der, inter.Raw}, PrivateKey: key, Leaf: leaf}
}

// verifyChain verifies a forged leaf against the primary's roots, as a
// peer that checks chains alone would.
func verifyChain(cert *tls.Certificate, roots rootsAnswer) error {
	pool, inter := x509.NewCertPool(), x509.NewCertPool()
	for _, r := range roots.Roots {
		pool.AppendCertsFromPEM([]byte(r.RootCert))
	}
	for _, der := range cert.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return err
		}
		inter.AddCert(c)
	}
	_, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err
}

func parseCert(t *testing.T, p string) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode([]byte(p))
	if block == nil {
		t.Fatalf("no PEM in %q", p)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// primaryRootName is the resource name of the primary's active root (and
// of its signing key): the first 32 hex digits of its id.
func primaryRootName(r rootsAnswer) string {
	name := strings.ReplaceAll(r.ActiveRootID, ":", "")
	if len(name) > 32 {
		name = name[:32]
	}
	return name
}
