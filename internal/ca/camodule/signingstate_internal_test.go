package camodule

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ca"
)

// defaultLimits are what a CAConfig without limits is filled with.
var defaultLimits = Limits{PerSecond: ca.DefaultCSRMaxPerSecond, Concurrent: ca.DefaultCSRMaxConcurrent}

const testTD = "6f1c0b1e-0d6a-4f57-9a3e-1f2d3c4b5a69.trellis"

type testRoot struct {
	cert *x509.Certificate
	key  crypto.Signer
	id   string
}

func newTestRoot(t *testing.T, now time.Time) testRoot {
	t.Helper()
	cert, key, err := ca.NewRoot(ca.RootOptions{TrustDomain: testTD, KeyType: ca.KeyType{Algorithm: "ec", Bits: 256}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	id, err := ca.KeyID(cert.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return testRoot{cert, key, id}
}

func res(t *testing.T, typ *pbresource.Type, name, version string, m proto.Message) *pbresource.Resource {
	t.Helper()
	data, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return &pbresource.Resource{Id: &pbresource.ID{Type: typ, Tenancy: &pbresource.Tenancy{}, Name: name}, Version: version, Data: data}
}

func (r testRoot) root(t *testing.T, version string, active bool, inter ...*x509.Certificate) *pbresource.Resource {
	t.Helper()
	var interPEM []string
	for _, c := range inter {
		interPEM = append(interPEM, string(ca.EncodeCerts(c)))
	}
	p := string(ca.EncodeCerts(r.cert))
	return res(t, ca.RootType, ca.RootName(r.id), version, &pbca.CARoot{
		Id: r.id, TrustDomain: testTD, RootCert: p, SigningCert: p, Active: active, IntermediateCerts: interPEM,
		NotBefore: timestamppb.New(r.cert.NotBefore), NotAfter: timestamppb.New(r.cert.NotAfter),
	})
}

func (r testRoot) signingKey(t *testing.T, version string, key crypto.Signer, rootID string) *pbresource.Resource {
	t.Helper()
	keyPEM, err := ca.EncodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return res(t, ca.SigningKeyType, ca.RootName(r.id), version, &pbca.CASigningKey{RootId: rootID, PrivateKey: string(keyPEM), SigningCert: string(ca.EncodeCerts(r.cert))})
}

func keys(list ...*pbresource.Resource) map[string]*pbresource.Resource {
	out := map[string]*pbresource.Resource{}
	for _, r := range list {
		out[r.GetId().GetName()] = r
	}
	return out
}

// What a server signs with, decided from the stored CA: the active root
// and its own key, the chain a leaf carries after a rotation, the
// configuration's settings; and each way the stored CA can be unfit to
// sign with, named without quoting a key.
func TestBuildSigningState(t *testing.T) {
	a := newTestRoot(t, t0)
	b := newTestRoot(t, t0.Add(time.Hour))
	cross, err := ca.CrossSign(b.cert, ca.Signer{Cert: a.cert, Key: a.key}, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	other := newTestRoot(t, t0)
	cfg := &pbca.CAConfig{LeafTtl: durationpb.New(2 * time.Hour), CsrMaxPerSecond: 7, CsrMaxConcurrent: 3}
	config := res(t, ca.ConfigType, ca.ConfigName, "9", cfg)

	st, err := buildSigningState(caView{roots: []*pbresource.Resource{a.root(t, "1", true)}, keys: keys(a.signingKey(t, "2", a.key, a.id))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.rootID != a.id || st.trustDomain != testTD || !st.signer.Cert.Equal(a.cert) || st.chainPEM != "" || st.leafTTL != ca.DefaultLeafTTL ||
		st.limits != defaultLimits || !st.rootNotAfter.Equal(a.cert.NotAfter) || !st.signingNotAfter.IsZero() {
		t.Errorf("root A alone: %+v", st)
	}

	// After a rotation: B is active and its leaves carry B cross-signed
	// by A, so that peers trusting A alone or B alone accept them.
	view := caView{
		roots:  []*pbresource.Resource{a.root(t, "3", false), b.root(t, "4", true, cross)},
		keys:   keys(a.signingKey(t, "2", a.key, a.id), b.signingKey(t, "5", b.key, b.id)),
		config: config,
	}
	st, err = buildSigningState(view, st)
	if err != nil {
		t.Fatal(err)
	}
	if st.rootID != b.id || st.leafTTL != 2*time.Hour || st.limits != (Limits{PerSecond: 7, Concurrent: 3}) || st.chainPEM != string(ca.EncodeCerts(cross)) {
		t.Errorf("after the rotation: %+v", st)
	}
	now := t0.Add(2 * time.Hour)
	web := ca.ServiceID{TrustDomain: testTD, Namespace: "default", Datacenter: "dc1", Service: "web"}
	csr := testCSR(t, web)
	leaf, err := ca.SignLeaf(csr, web, st.signer, st.leafTTL, now)
	if err != nil {
		t.Fatal(err)
	}
	for name, pool := range map[string][]*x509.Certificate{"A only": {a.cert}, "B only": {b.cert}} {
		if _, err := ca.VerifyPeer(append([]*x509.Certificate{leaf}, st.signer.Chain...), pool, now); err != nil {
			t.Errorf("a leaf of B with its chain, roots %s: %v", name, err)
		}
	}

	// A change of the configuration alone reuses the parsed key.
	view.config = res(t, ca.ConfigType, ca.ConfigName, "10", &pbca.CAConfig{LeafTtl: durationpb.New(3 * time.Hour)})
	again, err := buildSigningState(view, st)
	if err != nil {
		t.Fatal(err)
	}
	if again.signer.Key != st.signer.Key || again.leafTTL != 3*time.Hour || again.limits != defaultLimits {
		t.Errorf("after a config change: key reused %v, ttl %v, limits %+v", again.signer.Key == st.signer.Key, again.leafTTL, again.limits)
	}
	// And the key's leaf issuer and the record of its self-checks: a key
	// that failed one stays stopped, a proven one is not checked afresh.
	if again.issuer == nil || again.issuer != st.issuer || again.selfCheck == nil || again.selfCheck != st.selfCheck {
		t.Error("after a config change: the key's leaf issuer or self-check record was not kept")
	}

	for _, tc := range []struct {
		name string
		view caView
		want string
		is   error
	}{
		{"nothing", caView{}, "no active root yet", errNoActiveRoot},
		{"no active root", caView{roots: []*pbresource.Resource{a.root(t, "1", false)}, keys: keys(a.signingKey(t, "2", a.key, a.id))}, "no active root yet", errNoActiveRoot},
		{"no key yet", caView{roots: []*pbresource.Resource{a.root(t, "1", true)}}, "has no signing key stored yet", errNoKeyYet},
		{"key of another root", caView{roots: []*pbresource.Resource{a.root(t, "1", true)}, keys: keys(a.signingKey(t, "2", a.key, b.id))}, "is for root", nil},
		{"not the certificate's key", caView{roots: []*pbresource.Resource{a.root(t, "1", true)}, keys: keys(a.signingKey(t, "2", other.key, a.id))}, "not the signing certificate's", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := buildSigningState(tc.view, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Fatalf("= %v, want an error saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "PRIVATE") {
				t.Errorf("the error quotes a key: %v", err)
			}
		})
	}
}

// The signer keeps signing with the root it has while the stored CA is
// unfit to sign with: a rotation's new root can replicate to a follower
// a moment before its key does.
func TestSignerKeepsItsStateUntilTheNewRootCanSign(t *testing.T) {
	a := newTestRoot(t, t0)
	b := newTestRoot(t, t0)
	s := NewSigner(SignerConfig{Datacenter: "dc1", Now: func() time.Time { return t0.Add(time.Minute) }})
	set := func(list ...*pbresource.Resource) map[string]*pbresource.Resource { return keys(list...) }
	s.observe(ca.ConfigType, set())
	s.observe(ca.RootType, set(a.root(t, "1", true)))
	if s.state.Load() != nil {
		t.Fatal("built before every type delivered its snapshot")
	}
	s.observe(ca.SigningKeyType, set(a.signingKey(t, "2", a.key, a.id)))
	if s.ActiveRootID() != a.id || s.TrustDomain() != testTD {
		t.Fatalf("active root %q", s.ActiveRootID())
	}
	s.observe(ca.RootType, set(a.root(t, "3", false), b.root(t, "4", true)))
	if s.ActiveRootID() != a.id {
		t.Fatalf("switched to root %q before its key arrived", s.ActiveRootID())
	}
	s.observe(ca.SigningKeyType, set(a.signingKey(t, "2", a.key, a.id), b.signingKey(t, "5", b.key, b.id)))
	if s.ActiveRootID() != b.id {
		t.Fatalf("active root %q once B's key arrived, want B", s.ActiveRootID())
	}
}

func testCSR(t *testing.T, id ca.Identity) *x509.CertificateRequest {
	t.Helper()
	key, err := ca.GenerateKey(ca.KeyType{Algorithm: "ec", Bits: 256})
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{id.URI()}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	return csr
}
