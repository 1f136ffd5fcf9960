package camodule_test

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/ca/camodule"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
)

// leafOf signs a leaf of the service web with a root's stored key, as the
// signing service does: the chain is the root's intermediate_certs. It
// returns the leaf followed by its chain, as a TLS peer sends them.
func leafOf(t *testing.T, api resource.API, root camodule.RootBody, td string, now time.Time) []byte {
	t.Helper()
	key := signingKey(t, api, root.ID)
	signer, err := ca.ParseKey([]byte(key.GetPrivateKey()))
	if err != nil {
		t.Fatal(err)
	}
	certs, err := ca.ParseCerts([]byte(key.GetSigningCert()))
	if err != nil {
		t.Fatal(err)
	}
	var chain []*x509.Certificate
	for _, p := range root.IntermediateCerts {
		c, err := ca.ParseCerts([]byte(p))
		if err != nil {
			t.Fatal(err)
		}
		chain = append(chain, c...)
	}
	id := ca.ServiceID{TrustDomain: td, Namespace: "default", Datacenter: "dc1", Service: "web"}
	leafKey, err := ca.GenerateKey(ca.DefaultKeyType)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{id.URI()}}, leafKey)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := ca.ParseCSR(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.SignLeaf(csr, id, ca.Signer{Cert: certs[0], Key: signer, Chain: chain}, 72*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	return ca.EncodeCerts(append([]*x509.Certificate{leaf}, chain...)...)
}

func rootCerts(t *testing.T, roots ...camodule.RootBody) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for _, r := range roots {
		c, err := ca.ParseCerts([]byte(r.RootCert))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c...)
	}
	return out
}

// waitRotated waits until /v1/ca/roots shows an active root other than
// old, and returns the answer.
func waitRotated(t *testing.T, base, old string) camodule.RootsBody {
	t.Helper()
	var roots camodule.RootsBody
	eventually(t, "a new active root", func() bool {
		code, _ := get(t, base+"/v1/ca/roots", &roots)
		return code == http.StatusOK && roots.ActiveRootID != "" && roots.ActiveRootID != old
	})
	return roots
}

// A rotation asked for through PUT /v1/ca/config (rotation raised): two
// roots, the new one active with the old one's cross-signature as its
// intermediate, the old one rotated out. A leaf from before and one from
// after both verify, as a TLS peer verifies them, against the bundle
// /v1/ca/roots gives; the one from after also against a pool of only the
// old root (through the cross-signed intermediate) and of only the new.
func TestRotationCrossSigns(t *testing.T) {
	srv, base, first := readyServer(t)
	td := first.TrustDomain
	oldRoot := first.Roots[0]
	before := leafOf(t, srv.API(), oldRoot, td, time.Now())

	if code, body := put(t, base+"/v1/ca/config", map[string]any{"config": map[string]any{"rotation": 1}}); code != http.StatusOK {
		t.Fatalf("PUT rotation 1 = %d %s", code, body)
	}
	roots := waitRotated(t, base, oldRoot.ID)
	if len(roots.Roots) != 2 {
		t.Fatalf("%d roots after a rotation, want 2: %+v", len(roots.Roots), roots.Roots)
	}
	newRoot, old := roots.Roots[0], roots.Roots[1]
	if !newRoot.Active || newRoot.RotatedOutAt != nil || len(newRoot.IntermediateCerts) != 1 {
		t.Errorf("new root = %+v, want active with one intermediate", newRoot)
	}
	if old.ID != oldRoot.ID || old.Active || old.RotatedOutAt == nil {
		t.Errorf("old root = %+v, want %s rotated out", old, oldRoot.ID)
	}
	cross, err := ca.ParseCerts([]byte(newRoot.IntermediateCerts[0]))
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := ca.KeyID(cross[0].PublicKey); id != newRoot.ID || string(cross[0].AuthorityKeyId) == string(cross[0].SubjectKeyId) {
		t.Errorf("the intermediate is not the new root's key signed by another: key %s, AKID %x, SKID %x", id, cross[0].AuthorityKeyId, cross[0].SubjectKeyId)
	}
	after := leafOf(t, srv.API(), newRoot, td, time.Now())
	now := time.Now()
	bundle := rootCerts(t, roots.Roots...)
	for _, c := range []struct {
		name string
		leaf []byte
		pool []*x509.Certificate
	}{
		{"before, against the bundle", before, bundle},
		{"before, against the old root", before, rootCerts(t, old)},
		{"after, against the bundle", after, bundle},
		{"after, against the old root only", after, rootCerts(t, old)},
		{"after, against the new root only", after, rootCerts(t, newRoot)},
	} {
		if err := ca.VerifyLeaf(c.leaf, c.pool, now); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// The leaf from before does not verify against the new root alone:
	// the pools above prove something.
	if err := ca.VerifyLeaf(before, rootCerts(t, newRoot), now); err == nil {
		t.Error("a leaf of the old root verified against the new root alone")
	}

	var cfg configAnswer
	eventually(t, "the manager reports the new root", func() bool {
		get(t, base+"/v1/ca/config", &cfg)
		return cfg.Manager["active_root_id"] == newRoot.ID && cfg.Manager["state"] == ca.StateReady
	})
	// rotation only goes up.
	if code, body := put(t, base+"/v1/ca/config", map[string]any{"config": map[string]any{"rotation": 0}}); code != http.StatusBadRequest || !strings.Contains(body, "rotation:") {
		t.Errorf("PUT rotation 0 after 1 = %d %s, want 400 naming rotation", code, body)
	}
	// A new key type rotates too.
	if code, body := put(t, base+"/v1/ca/config", map[string]any{"config": map[string]any{"private_key_type": "ec", "private_key_bits": 384}}); code != http.StatusOK {
		t.Fatalf("PUT ec 384 = %d %s", code, body)
	}
	third := waitRotated(t, base, newRoot.ID)
	certs := rootCerts(t, third.Roots[0])
	if kt, _ := ca.KeyTypeOf(certs[0].PublicKey); kt != (ca.KeyType{Algorithm: "ec", Bits: 384}) || len(third.Roots) != 3 {
		t.Errorf("after the key change: root key %v and %d roots, want ec-384 and 3", kt, len(third.Roots))
	}
}

// A supplied root with its key: the key is stored sealed and never shown;
// the CA rotates to the root, cross-signed by the old one; GET's answer
// sent back keeps it; a rotation without a new root is refused.
func TestRotationToSuppliedRoot(t *testing.T) {
	srv, base, first := readyServer(t)
	certPEM, keyPEM := suppliedPair(t, first.TrustDomain, ca.KeyType{Algorithm: "rsa", Bits: 2048}, time.Now(), 0)
	code, body := put(t, base+"/v1/ca/config", map[string]any{"config": map[string]any{"root_cert": certPEM, "private_key": keyPEM}})
	if code != http.StatusOK {
		t.Fatalf("PUT a supplied root = %d %s", code, body)
	}
	assertNoKey(t, "the PUT's answer", body, keyPEM)
	roots := waitRotated(t, base, first.ActiveRootID)
	supplied := rootCerts(t, roots.Roots[0])[0]
	if id, _ := ca.KeyID(supplied.PublicKey); id != roots.ActiveRootID || len(roots.Roots) != 2 || len(roots.Roots[0].IntermediateCerts) != 1 {
		t.Fatalf("roots = %+v, want the supplied root active and cross-signed", roots)
	}
	if stored := signingKey(t, srv.API(), roots.ActiveRootID); stored.GetPrivateKey() != keyPEM {
		t.Error("the stored key is not the one supplied")
	}
	// The manager reports the rotation on the CAConfig after writing the
	// roots, which changes its version: wait for that report, so that the
	// answer sent back below is not stale (409).
	var whole string
	eventually(t, "the manager reports the supplied root active", func() bool {
		var c configAnswer
		_, whole = get(t, base+"/v1/ca/config", &c)
		return c.Manager["active_root_id"] == roots.ActiveRootID
	})
	assertNoKey(t, "GET /v1/ca/config", whole, keyPEM)
	_, rootsBody := get(t, base+"/v1/ca/roots", nil)
	assertNoKey(t, "GET /v1/ca/roots", rootsBody, keyPEM)
	var cfg configAnswer
	get(t, base+"/v1/ca/config", &cfg)
	if cfg.Config["private_key_type"] != "rsa" || cfg.Config["private_key_bits"] != float64(2048) || cfg.Config["root_cert"] != certPEM {
		t.Errorf("config = %v, want the supplied root's key type", cfg.Config)
	}

	leaf := leafOf(t, srv.API(), roots.Roots[0], first.TrustDomain, time.Now())
	if err := ca.VerifyLeaf(leaf, rootCerts(t, roots.Roots[1]), time.Now()); err != nil {
		t.Errorf("a leaf of the supplied root against the old root only: %v", err)
	}
	if code, again := put(t, base+"/v1/ca/config", whole); code != http.StatusOK {
		t.Errorf("PUT of GET's answer with the supplied root = %d %s", code, again)
	}
	if code, body := put(t, base+"/v1/ca/config", map[string]any{"config": map[string]any{"rotation": 1}}); code != http.StatusBadRequest || !strings.Contains(body, "rotation:") {
		t.Errorf("PUT rotation with the supplied root kept = %d %s, want 400 naming rotation", code, body)
	}
	// Leaving the supplied root: root_cert "" and a rotation.
	if code, body := put(t, base+"/v1/ca/config", map[string]any{"config": map[string]any{"root_cert": "", "rotation": 1}}); code != http.StatusOK {
		t.Fatalf("PUT root_cert \"\" = %d %s", code, body)
	}
	generated := waitRotated(t, base, roots.ActiveRootID)
	if len(generated.Roots) != 3 {
		t.Errorf("%d roots, want 3", len(generated.Roots))
	}
}

// configure writes the CAConfig directly, creating it when there is none
// (the test's managers run without the routes).
func configure(t *testing.T, api resource.API, c *pbca.CAConfig) {
	t.Helper()
	ctx := resource.FromOperations(context.Background())
	ca.FillConfigDefaults(c)
	data, err := anypb.New(c)
	if err != nil {
		t.Fatal(err)
	}
	version := resource.CreateOnly
	resp, err := api.Read(ctx, &pbresource.ReadRequest{Id: ca.ConfigID()})
	switch {
	case err == nil:
		version = resp.GetResource().GetVersion()
	case status.Code(err) != codes.NotFound:
		t.Fatal(err)
	}
	if _, err := api.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: ca.ConfigID(), Version: version, Data: data}}); err != nil {
		t.Fatal(err)
	}
}

func storedRoots(t *testing.T, api resource.API) map[string]*pbca.CARoot {
	t.Helper()
	list, err := api.List(context.Background(), &pbresource.ListRequest{Type: ca.RootType, Tenancy: &pbresource.Tenancy{}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*pbca.CARoot{}
	for _, res := range list.GetResources() {
		r, err := resource.DecodeData[*pbca.CARoot](res)
		if err != nil {
			t.Fatal(err)
		}
		out[r.GetId()] = r
	}
	return out
}

// Pruning on the manager's clock: a root rotated out stays until
// 2 × leaf_ttl has passed, the manager asks to run again then, and then
// the root and its key go; the active root stays.
func TestPruneAfterTwiceLeafTTL(t *testing.T) {
	srv := start(t, []module.Module{core.Module(), caTypes{}})
	eventually(t, "the cluster id", func() bool {
		_, err := core.ClusterID(context.Background(), srv.API())
		return err == nil
	})
	now := time.Now().UTC().Truncate(time.Second)
	m := &camodule.Manager{API: srv.API(), Now: func() time.Time { return now }}
	leafTTL := 2 * time.Hour
	configure(t, srv.API(), &pbca.CAConfig{LeafTtl: durationOf(leafTTL)})
	first, err := m.Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	configure(t, srv.API(), &pbca.CAConfig{Rotation: 1, LeafTtl: durationOf(leafTTL)})
	rotatedAt := now
	out, err := m.Reconcile(context.Background())
	if err != nil || out.RotatedOut != first.ActiveRootID || out.ActiveRootID == first.ActiveRootID {
		t.Fatalf("Reconcile after rotation 1 = %+v, %v; want %s rotated out", out, err, first.ActiveRootID)
	}
	second := out.ActiveRootID
	if r := storedRoots(t, srv.API())[first.ActiveRootID]; r.GetActive() || !r.GetRotatedOutAt().AsTime().Equal(rotatedAt) {
		t.Fatalf("old root = %v, want rotated out at %v", r, rotatedAt)
	}

	due := rotatedAt.Add(2 * leafTTL)
	now = due.Add(-time.Second)
	out, err = m.Reconcile(context.Background())
	if err != nil || len(out.Pruned) != 0 || !out.NextPrune.Equal(due) {
		t.Fatalf("Reconcile a second before 2 × leaf_ttl = %+v, %v; want nothing pruned, next at %v", out, err, due)
	}
	if n := len(storedRoots(t, srv.API())); n != 2 {
		t.Fatalf("%d roots before the prune time, want 2", n)
	}
	now = due
	out, err = m.Reconcile(context.Background())
	if err != nil || len(out.Pruned) != 1 || out.Pruned[0] != first.ActiveRootID || !out.NextPrune.IsZero() {
		t.Fatalf("Reconcile at 2 × leaf_ttl = %+v, %v; want %s pruned, nothing next", out, err, first.ActiveRootID)
	}
	left := storedRoots(t, srv.API())
	if len(left) != 1 || left[second] == nil || !left[second].GetActive() {
		t.Errorf("roots after the prune = %v, want only the active %s", left, second)
	}
	if n := count(t, srv.API(), ca.SigningKeyType); n != 1 {
		t.Errorf("%d signing keys after the prune, want 1", n)
	}
}

// A rotation that cannot be made (a supplied root whose key was never
// stored) leaves the old root active and says why on the configuration.
func TestFailedRotationKeepsTheRoot(t *testing.T) {
	srv := start(t, []module.Module{core.Module(), caTypes{}})
	eventually(t, "the cluster id", func() bool {
		_, err := core.ClusterID(context.Background(), srv.API())
		return err == nil
	})
	m := &camodule.Manager{API: srv.API()}
	first, err := m.Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	clusterID, _ := core.ClusterID(context.Background(), srv.API())
	certPEM, _ := suppliedPair(t, ca.TrustDomain(clusterID), ca.DefaultKeyType, time.Now(), 0)
	configure(t, srv.API(), &pbca.CAConfig{RootCert: certPEM})
	out, err := m.Reconcile(context.Background())
	if err == nil || !strings.Contains(err.Error(), "root_cert") || out.ActiveRootID != first.ActiveRootID {
		t.Fatalf("Reconcile = %+v, %v; want a failure naming root_cert and %s still active", out, err, first.ActiveRootID)
	}
	roots := storedRoots(t, srv.API())
	if len(roots) != 1 || !roots[first.ActiveRootID].GetActive() {
		t.Errorf("roots = %v, want only %s, active", roots, first.ActiveRootID)
	}
	resp, err := srv.API().Read(context.Background(), &pbresource.ReadRequest{Id: ca.ConfigID()})
	if err != nil {
		t.Fatal(err)
	}
	var st pbca.CAManagerStatus
	if err := resp.GetResource().GetStatus()[ca.ManagerStatusKey].GetData().UnmarshalTo(&st); err != nil {
		t.Fatal(err)
	}
	if st.GetState() != ca.StateFailed || st.GetActiveRootId() != first.ActiveRootID || !strings.Contains(st.GetLastError(), "root_cert") || !strings.Contains(st.GetMessage(), "unchanged") {
		t.Errorf("status = %v, want failed, the old root still active", &st)
	}
}

func durationOf(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// Two managers that rotate at once make one new root between them: the
// one whose batch comes second finds the roots changed since its list,
// fails, and its retry finds the rotation done.
func TestConcurrentRotationsMakeOneRoot(t *testing.T) {
	srv := start(t, []module.Module{core.Module(), caTypes{}})
	eventually(t, "the cluster id", func() bool {
		_, err := core.ClusterID(context.Background(), srv.API())
		return err == nil
	})
	first, err := (&camodule.Manager{API: srv.API()}).Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	configure(t, srv.API(), &pbca.CAConfig{Rotation: 1})
	other := &camodule.Manager{API: srv.API()}
	api := &raceAPI{API: srv.API(), other: func() (string, error) {
		out, err := other.Reconcile(context.Background())
		return out.ActiveRootID, err
	}}
	m := &camodule.Manager{API: api}
	if out, err := m.Reconcile(context.Background()); err == nil {
		t.Fatalf("Reconcile = %+v, nil: its batch should have failed, the other rotated after its list", out)
	}
	if api.ran == "" || api.ran == first.ActiveRootID {
		t.Fatalf("the other manager did not rotate: %q", api.ran)
	}
	out, err := m.Reconcile(context.Background())
	if err != nil || out.ActiveRootID != api.ran || out.RotatedOut != "" {
		t.Fatalf("retried Reconcile = %+v, %v; want the other's root %q kept", out, err, api.ran)
	}
	roots := storedRoots(t, srv.API())
	if len(roots) != 2 || !roots[api.ran].GetActive() || roots[first.ActiveRootID].GetActive() {
		t.Errorf("roots = %v, want two, %s active", roots, api.ran)
	}
	if n := count(t, srv.API(), ca.SigningKeyType); n != 2 {
		t.Errorf("%d signing keys, want 2", n)
	}
}

// After a rotation, the signing service of the server signs under the
// new root, and its leaves carry the cross-signed certificate: they verify
// against the old root alone and against the new root alone.
func TestSignAfterRotation(t *testing.T) {
	_, base, first := readyServer(t)
	if code, body := put(t, base+"/v1/ca/config", map[string]any{"config": map[string]any{"rotation": 1}}); code != http.StatusOK {
		t.Fatalf("PUT rotation 1 = %d %s", code, body)
	}
	roots := waitRotated(t, base, first.ActiveRootID)
	web := ca.ServiceID{TrustDomain: roots.TrustDomain, Namespace: "default", Datacenter: "dc1", Service: "web"}
	var leaf camodule.SignBody
	eventually(t, "the server signs under the new root", func() bool {
		leaf = signOK(t, base, newCSR(t, p256(t), []string{web.String()}))
		return leaf.ChainPEM != ""
	})
	whole := []byte(leaf.CertPEM + leaf.ChainPEM)
	now := time.Now()
	if err := ca.VerifyLeaf(whole, rootCerts(t, roots.Roots[1]), now); err != nil || roots.Roots[1].ID != first.ActiveRootID {
		t.Errorf("a new leaf against the old root %s alone: %v", roots.Roots[1].ID, err)
	}
	if err := ca.VerifyLeaf(whole, rootCerts(t, roots.Roots[0]), now); err != nil {
		t.Errorf("a new leaf against the new root alone: %v", err)
	}
	if err := ca.VerifyLeaf(whole, rootCerts(t, roots.Roots...), now); err != nil {
		t.Errorf("a new leaf against the bundle: %v", err)
	}
}

// Pruning waits 2 × the longest leaf_ttl in force while a root was
// active: raising leaf_ttl is recorded on the active root, and lowering it
// later, or at the rotation, does not shorten the wait.
func TestPruneWaitsForTheLongestLeafTTL(t *testing.T) {
	srv := start(t, []module.Module{core.Module(), caTypes{}})
	eventually(t, "the cluster id", func() bool {
		_, err := core.ClusterID(context.Background(), srv.API())
		return err == nil
	})
	now := time.Now().UTC().Truncate(time.Second)
	m := &camodule.Manager{API: srv.API(), Now: func() time.Time { return now }}
	configure(t, srv.API(), &pbca.CAConfig{LeafTtl: durationOf(2 * time.Hour)})
	first, err := m.Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	configure(t, srv.API(), &pbca.CAConfig{LeafTtl: durationOf(10 * time.Hour)})
	if _, err := m.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := storedRoots(t, srv.API())[first.ActiveRootID].GetMaxLeafTtl().AsDuration(); got != 10*time.Hour {
		t.Fatalf("max_leaf_ttl of the active root after leaf_ttl rose to 10h = %v", got)
	}
	configure(t, srv.API(), &pbca.CAConfig{LeafTtl: durationOf(time.Hour), Rotation: 1})
	rotatedAt := now
	if out, err := m.Reconcile(context.Background()); err != nil || out.RotatedOut != first.ActiveRootID {
		t.Fatalf("Reconcile after rotation 1 = %+v, %v", out, err)
	}
	now = rotatedAt.Add(2 * time.Hour) // 2 × the leaf_ttl now in force
	out, err := m.Reconcile(context.Background())
	if due := rotatedAt.Add(20 * time.Hour); err != nil || len(out.Pruned) != 0 || !out.NextPrune.Equal(due) {
		t.Fatalf("Reconcile at 2 × the lowered leaf_ttl = %+v, %v; want nothing pruned before %v", out, err, due)
	}
	now = rotatedAt.Add(20 * time.Hour)
	if out, err := m.Reconcile(context.Background()); err != nil || len(out.Pruned) != 1 || out.Pruned[0] != first.ActiveRootID {
		t.Fatalf("Reconcile at 2 × the longest leaf_ttl = %+v, %v; want %s pruned", out, err, first.ActiveRootID)
	}
}
