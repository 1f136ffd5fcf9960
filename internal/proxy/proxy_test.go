package proxy

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	pbmesh "trellis.dev/trellis/api/mesh/v1"
	pbproxy "trellis.dev/trellis/api/proxy/v1"
	"trellis.dev/trellis/internal/ca"
)

const (
	testTD = "11111111-2222-3333-4444-555555555555.trellis"
	testDC = "dc1"
)

// testCA is a root of the project's CA code that issues real leaves.
type testCA struct {
	td   string
	cert *x509.Certificate
	key  crypto.Signer
}

func newTestCA(t testing.TB, td string, now time.Time) *testCA {
	t.Helper()
	cert, key, err := ca.NewRoot(ca.RootOptions{TrustDomain: td, Now: now})
	if err != nil {
		t.Fatalf("NewRoot: %v", err)
	}
	return &testCA{td: td, cert: cert, key: key}
}

func (c *testCA) rootPEM() []byte { return ca.EncodeCerts(c.cert) }

// leaf issues a leaf of the service ns/svc valid from now for ttl, and
// returns its PEM and its key's PEM.
func (c *testCA) leaf(t testing.TB, ns, svc string, now time.Time, ttl time.Duration) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ca.GenerateKey(ca.DefaultKeyType)
	if err != nil {
		t.Fatal(err)
	}
	id := ca.ServiceID{TrustDomain: c.td, Namespace: ns, Datacenter: testDC, Service: svc}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{id.URI()}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.SignLeaf(csr, id, ca.Signer{Cert: c.cert, Key: c.key}, ttl, now)
	if err != nil {
		t.Fatalf("SignLeaf: %v", err)
	}
	keyPEM, err = ca.EncodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return ca.EncodeCerts(cert), keyPEM
}

func spiffeOf(td, ns, svc string) string {
	return ca.ServiceID{TrustDomain: td, Namespace: ns, Datacenter: testDC, Service: svc}.String()
}

// testSnapshot is a snapshot of the service default/svc with a fresh
// leaf of c, trusting roots (c's root when none are given).
func testSnapshot(t testing.TB, c *testCA, svc, protocol, appAddr string, roots ...[]byte) *pbproxy.Snapshot {
	t.Helper()
	now := time.Now()
	certPEM, keyPEM := c.leaf(t, "default", svc, now, time.Hour)
	if len(roots) == 0 {
		roots = [][]byte{c.rootPEM()}
	}
	return &pbproxy.Snapshot{
		Version: "v1",
		Identity: &pbproxy.Identity{Namespace: "default", Service: svc, Datacenter: testDC, TrustDomain: c.td,
			SpiffeId: spiffeOf(c.td, "default", svc), Task: "t1", Instance: "i1"},
		Certificates: &pbproxy.Certificates{LeafPem: certPEM, KeyPem: keyPEM, RootsPem: roots},
		Inbound:      &pbproxy.Inbound{Address: "127.0.0.1:0", AppAddress: appAddr, Protocol: protocol, DefaultIntention: "deny"},
		AdminAddress: "127.0.0.1:0",
	}
}

func allowing(sources ...string) *pbmesh.Intentions {
	in := &pbmesh.Intentions{}
	for _, s := range sources {
		in.Sources = append(in.Sources, &pbmesh.IntentionSource{Namespace: "default", Name: s, Action: "allow"})
	}
	return in
}

func newTestProxy(t testing.TB) *Proxy {
	t.Helper()
	p, err := New(Config{HeaderTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestUpdateRefusesMalformed: each malformed snapshot is refused with an
// error naming its field, counted, and the previous snapshot stays.
func TestUpdateRefusesMalformed(t *testing.T) {
	c := newTestCA(t, testTD, time.Now())
	other := newTestCA(t, testTD, time.Now())
	good := testSnapshot(t, c, "api", "http", "127.0.0.1:8080")
	p := newTestProxy(t)
	if err := p.Update(good); err != nil {
		t.Fatalf("Update(good): %v", err)
	}
	otherLeaf, otherKey := other.leaf(t, "default", "api", time.Now(), time.Hour)
	for _, tc := range []struct {
		name, field string
		mutate      func(s *pbproxy.Snapshot)
	}{
		{"no version", "snapshot.version", func(s *pbproxy.Snapshot) { s.Version = "" }},
		{"no identity", "snapshot.identity.trust_domain", func(s *pbproxy.Snapshot) { s.Identity = nil }},
		{"a spiffe id of another service", "snapshot.identity.spiffe_id", func(s *pbproxy.Snapshot) { s.Identity.SpiffeId = spiffeOf(testTD, "default", "web") }},
		{"an agent's id", "snapshot.identity.spiffe_id", func(s *pbproxy.Snapshot) {
			s.Identity.SpiffeId = ca.AgentID{TrustDomain: testTD, Datacenter: testDC, Instance: "i"}.String()
		}},
		{"garbage leaf", "snapshot.certificates.leaf_pem", func(s *pbproxy.Snapshot) { s.Certificates.LeafPem = []byte("junk") }},
		{"a key of another leaf", "snapshot.certificates.leaf_pem", func(s *pbproxy.Snapshot) { s.Certificates.KeyPem = otherKey }},
		{"a leaf of another service", "snapshot.certificates.leaf_pem", func(s *pbproxy.Snapshot) {
			l, k := c.leaf(t, "default", "web", time.Now(), time.Hour)
			s.Certificates.LeafPem, s.Certificates.KeyPem = l, k
		}},
		{"a leaf of another root", "snapshot.certificates.leaf_pem", func(s *pbproxy.Snapshot) { s.Certificates.LeafPem, s.Certificates.KeyPem = otherLeaf, otherKey }},
		{"no roots", "snapshot.certificates.roots_pem", func(s *pbproxy.Snapshot) { s.Certificates.RootsPem = nil }},
		{"a garbage root", "snapshot.certificates.roots_pem[1]", func(s *pbproxy.Snapshot) { s.Certificates.RootsPem = append(s.Certificates.RootsPem, []byte("x")) }},
		{"a bad app address", "snapshot.inbound.app_address", func(s *pbproxy.Snapshot) { s.Inbound.AppAddress = "localhost" }},
		{"a bad protocol", "snapshot.inbound.protocol", func(s *pbproxy.Snapshot) { s.Inbound.Protocol = "udp" }},
		{"a bad default", "snapshot.inbound.default_intention", func(s *pbproxy.Snapshot) { s.Inbound.DefaultIntention = "maybe" }},
		{"a bad intention", "snapshot.inbound.intentions.sources[0]", func(s *pbproxy.Snapshot) {
			s.Inbound.Intentions = &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Action: "perhaps"}}}
		}},
		{"an upstream without a spiffe id", "snapshot.upstreams[0].spiffe_id", func(s *pbproxy.Snapshot) {
			s.Upstreams = []*pbproxy.Upstream{{Namespace: "default", Service: "db", BindAddress: "127.0.0.1:9000", Protocol: "tcp"}}
		}},
		{"a bad unknown action", "snapshot.outbound.unknown", func(s *pbproxy.Snapshot) {
			s.Outbound = &pbproxy.TransparentOutbound{Address: "127.0.0.1:15001", Unknown: "maybe"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := proto.Clone(good).(*pbproxy.Snapshot)
			bad.Version = "v2"
			tc.mutate(bad)
			before := testutilCounter(p.Stats().SnapshotRejections)
			err := p.Update(bad)
			if err == nil {
				t.Fatal("Update took a malformed snapshot")
			}
			if !strings.HasPrefix(err.Error(), tc.field) {
				t.Errorf("error %q does not start with the field %s", err, tc.field)
			}
			if got := testutilCounter(p.Stats().SnapshotRejections); got != before+1 {
				t.Errorf("rejections %v, want %v", got, before+1)
			}
			if v := p.Snapshot().GetVersion(); v != "v1" {
				t.Errorf("current snapshot %q, want the previous v1", v)
			}
		})
	}
	if err := p.Update(nil); err == nil {
		t.Error("Update(nil) took it")
	}
}

// TestRunFailsWhenTheInboundPortIsTaken: Run returns the listener's
// error, naming the component, and stops the others.
func TestRunFailsWhenTheInboundPortIsTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := newTestCA(t, testTD, time.Now())
	snap := testSnapshot(t, c, "api", "tcp", "127.0.0.1:1")
	snap.Inbound.Address = ln.Addr().String()
	p := newTestProxy(t)
	if err := p.Update(snap); err != nil {
		t.Fatal(err)
	}
	err = p.Run(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "inbound: ") {
		t.Fatalf("Run: %v, want the inbound listener's error", err)
	}
}

// TestUpdateNeverPanics feeds Update snapshots made by corrupting the
// bytes of a good one: each is taken or refused, never a panic, and a
// refusal leaves the previous snapshot.
func TestUpdateNeverPanics(t *testing.T) {
	c := newTestCA(t, testTD, time.Now())
	good := testSnapshot(t, c, "api", "http", "127.0.0.1:8080")
	good.Inbound.Intentions = &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Namespace: "default", Name: "web",
		Permissions: []*pbmesh.IntentionPermission{{Action: "allow", Http: &pbmesh.IntentionHTTPMatch{PathRegex: "/v[0-9]+/.*", Methods: []string{"GET"}}}}}}}
	good.Upstreams = []*pbproxy.Upstream{{Namespace: "default", Service: "db", BindAddress: "127.0.0.1:9000", Protocol: "tcp",
		SpiffeId: spiffeOf(testTD, "default", "db"), Endpoints: []*pbproxy.Endpoint{{Instance: "db-1", Address: "10.0.0.1:15000", AppAddress: "10.0.0.1:5432"}}}}
	raw, err := proto.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	p := newTestProxy(t)
	if err := p.Update(good); err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, func(rt *rapid.T) {
		b := append([]byte(nil), raw...)
		for range rapid.IntRange(1, 8).Draw(rt, "mutations") {
			i := rapid.IntRange(0, len(b)-1).Draw(rt, "at")
			b[i] = rapid.Byte().Draw(rt, "byte")
		}
		var s pbproxy.Snapshot
		if proto.Unmarshal(b, &s) != nil {
			return
		}
		before := p.Snapshot()
		if err := p.Update(&s); err != nil && p.Snapshot() != before {
			rt.Fatalf("a refused snapshot replaced the previous one: %v", err)
		}
	})
}
