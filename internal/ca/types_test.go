package ca_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

// testRoot is a self-signed ECDSA CA certificate made for these tests.
type testRoot struct {
	certPEM, keyPEM, id string
	cert                *x509.Certificate
}

func newTestRoot(t *testing.T, isCA bool) testRoot {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test root"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: isCA, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	pairs := make([]string, len(sum))
	for i := range sum {
		pairs[i] = hex.EncodeToString(sum[i : i+1])
	}
	return testRoot{
		certPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		keyPEM:  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})),
		id:      strings.Join(pairs, ":"),
		cert:    cert,
	}
}

func resourceOf(t *testing.T, id *pbresource.ID, m proto.Message) *pbresource.Resource {
	t.Helper()
	data, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return &pbresource.Resource{Id: id, Data: data}
}

// wantField checks err against a wanted "field: reason" fragment ("" for
// no error) and that it never quotes secret.
func wantField(t *testing.T, err error, want, secret string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	var fe *resource.FieldError
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
	if !errorAs(err, &fe) {
		t.Fatalf("%v is not a FieldError", err)
	}
	if secret != "" && strings.Contains(err.Error(), strings.Split(secret, "\n")[1]) {
		t.Fatalf("the error quotes the private key: %v", err)
	}
}

func errorAs(err error, fe **resource.FieldError) bool {
	f, ok := err.(*resource.FieldError)
	*fe = f
	return ok
}

func TestRootName(t *testing.T) {
	r := newTestRoot(t, true)
	name := ca.RootName(r.id)
	if len(name) != 32 || strings.Contains(name, ":") || !strings.HasPrefix(strings.ReplaceAll(r.id, ":", ""), name) {
		t.Fatalf("RootName(%s) = %q", r.id, name)
	}
	if err := resource.ValidateName("name", name); err != nil {
		t.Fatal(err)
	}
	if ca.RootName("ab:cd") != "" {
		t.Fatal("a short key id names a root")
	}
}

func TestMutateConfigFillsDefaults(t *testing.T) {
	res := resourceOf(t, ca.ConfigID(), &pbca.CAConfig{})
	if err := ca.MutateConfig(res); err != nil {
		t.Fatal(err)
	}
	c, _ := resource.DecodeData[*pbca.CAConfig](res)
	want := &pbca.CAConfig{
		Provider: "builtin", PrivateKeyType: "ec", PrivateKeyBits: 256,
		LeafTtl: durationpb.New(72 * time.Hour), IntermediateTtl: durationpb.New(8760 * time.Hour), RootTtl: durationpb.New(87600 * time.Hour),
		CsrMaxPerSecond: ca.DefaultCSRMaxPerSecond, CsrMaxConcurrent: ca.DefaultCSRMaxConcurrent,
	}
	if !proto.Equal(c, want) {
		t.Fatalf("defaults = %v, want %v", c, want)
	}
	if err := ca.ValidateConfig(res); err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
	// RSA without bits gets RSA's default size, not EC's.
	rsa := &pbca.CAConfig{PrivateKeyType: "rsa"}
	ca.FillConfigDefaults(rsa)
	if rsa.GetPrivateKeyBits() != 2048 {
		t.Fatalf("rsa default bits = %d", rsa.GetPrivateKeyBits())
	}
}

func TestValidateConfig(t *testing.T) {
	root := newTestRoot(t, true)
	leaf := newTestRoot(t, false)
	h := func(d time.Duration) *durationpb.Duration { return durationpb.New(d) }
	cases := []struct {
		name    string
		resName string
		edit    func(*pbca.CAConfig)
		want    string
	}{
		{"defaults", "", func(*pbca.CAConfig) {}, ""},
		{"ec 384", "", func(c *pbca.CAConfig) { c.PrivateKeyBits = 384 }, ""},
		{"rsa 4096", "", func(c *pbca.CAConfig) { c.PrivateKeyType, c.PrivateKeyBits = "rsa", 4096 }, ""},
		{"a supplied root's certificate alone (its key is stored apart)", "", func(c *pbca.CAConfig) { c.RootCert = root.certPEM }, ""},
		{"another name", "other", func(*pbca.CAConfig) {}, `id.name: must be "default"`},
		{"vault", "", func(c *pbca.CAConfig) { c.Provider = "vault" }, `data.provider: "vault" is not a provider`},
		{"dsa", "", func(c *pbca.CAConfig) { c.PrivateKeyType = "dsa" }, `data.private_key_type: "dsa" is not a key type`},
		{"ec 521", "", func(c *pbca.CAConfig) { c.PrivateKeyBits = 521 }, "data.private_key_bits: 521 bits is not a size for a ec key"},
		{"rsa 1024", "", func(c *pbca.CAConfig) { c.PrivateKeyType, c.PrivateKeyBits = "rsa", 1024 }, "data.private_key_bits: 1024 bits"},
		{"rsa 256", "", func(c *pbca.CAConfig) { c.PrivateKeyType = "rsa" }, "data.private_key_bits: 256 bits is not a size for a rsa key"},
		{"leaf 59m", "", func(c *pbca.CAConfig) { c.LeafTtl = h(59 * time.Minute) }, "data.leaf_ttl: 59m0s is under the minimum of 1h0m0s"},
		{"leaf 1h", "", func(c *pbca.CAConfig) { c.LeafTtl = h(time.Hour) }, ""},
		{"leaf over root", "", func(c *pbca.CAConfig) {
			c.RootTtl, c.IntermediateTtl, c.LeafTtl = h(48*time.Hour), h(24*time.Hour), h(72*time.Hour)
		}, "data.leaf_ttl: 72h0m0s is over root_ttl"},
		{"intermediate not over leaf", "", func(c *pbca.CAConfig) { c.IntermediateTtl = h(72 * time.Hour) }, "data.intermediate_ttl: 72h0m0s must be over leaf_ttl"},
		{"intermediate over root", "", func(c *pbca.CAConfig) { c.IntermediateTtl = h(100000 * time.Hour) }, "data.intermediate_ttl: 100000h0m0s is over root_ttl"},
		{"negative root ttl", "", func(c *pbca.CAConfig) { c.RootTtl = h(-time.Hour) }, "data.root_ttl: -1h0m0s is not a positive duration"},
		{"invalid duration", "", func(c *pbca.CAConfig) { c.LeafTtl = &durationpb.Duration{Seconds: 1, Nanos: -1} }, "data.leaf_ttl: is not a valid duration"},
		{"negative rate", "", func(c *pbca.CAConfig) { c.CsrMaxPerSecond = -1 }, "data.csr_max_per_second: -1 is not a rate"},
		{"NaN rate", "", func(c *pbca.CAConfig) { c.CsrMaxPerSecond = nan() }, "data.csr_max_per_second: NaN"},
		{"negative concurrency", "", func(c *pbca.CAConfig) { c.CsrMaxConcurrent = -3 }, "data.csr_max_concurrent: -3 is negative"},
		{"root not PEM", "", func(c *pbca.CAConfig) { c.RootCert = "hello" }, "data.root_cert: is not PEM"},
		{"root is a key", "", func(c *pbca.CAConfig) { c.RootCert = root.keyPEM }, `data.root_cert: holds a PEM "PRIVATE KEY" block`},
		{"root not a CA", "", func(c *pbca.CAConfig) { c.RootCert = leaf.certPEM }, "data.root_cert: is not a CA certificate"},
		{"a stored private key", "", func(c *pbca.CAConfig) { c.RootCert, c.PrivateKey = root.certPEM, root.keyPEM }, "data.private_key: is write-only"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := &pbca.CAConfig{}
			ca.FillConfigDefaults(cfg)
			c.edit(cfg)
			id := ca.ConfigID()
			if c.resName != "" {
				id.Name = c.resName
			}
			wantField(t, ca.ValidateConfig(resourceOf(t, id, cfg)), c.want, root.keyPEM)
		})
	}
}

func nan() float64 { var z float64; return z / z }

func TestValidateConfigRequest(t *testing.T) {
	root := newTestRoot(t, true)
	called := 0
	check := func(cert, key []byte) error {
		called++
		if string(cert) != root.certPEM || string(key) != root.keyPEM {
			t.Error("the supplied-root check got other PEM than given")
		}
		return nil
	}
	cases := []struct {
		name       string
		cert, key  string
		want       string
		wantCalled int
	}{
		{"neither", "", "", "", 0},
		{"both", root.certPEM, root.keyPEM, "", 1},
		{"certificate alone", root.certPEM, "", "private_key: is required with root_cert", 0},
		{"key alone", "", root.keyPEM, "root_cert: is required with private_key", 0},
		{"key not PEM", root.certPEM, "not a key", "private_key: is not PEM", 0},
		{"key is a certificate", root.certPEM, root.certPEM, `private_key: is a PEM "CERTIFICATE" block, not a private key`, 0},
		{"key garbled", root.certPEM, strings.Replace(root.keyPEM, "M", "A", 3), "private_key: is a PEM PRIVATE KEY block that does not parse", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			called = 0
			cfg := &pbca.CAConfig{RootCert: c.cert, PrivateKey: c.key}
			ca.FillConfigDefaults(cfg)
			wantField(t, ca.ValidateConfigRequest(cfg, check), c.want, root.keyPEM)
			if called != c.wantCalled {
				t.Fatalf("the supplied-root check ran %d times, want %d", called, c.wantCalled)
			}
		})
	}
}

func goodRoot(r testRoot) *pbca.CARoot {
	return &pbca.CARoot{
		Id: r.id, TrustDomain: "1b4e28ba-2fa1-41d2-883f-0016d3cca427.trellis", RootCert: r.certPEM,
		Active: true, NotBefore: timestamppb.New(r.cert.NotBefore), NotAfter: timestamppb.New(r.cert.NotAfter),
		PrivateKeyType: "ec", PrivateKeyBits: 256, Datacenter: "dc1",
	}
}

func TestValidateRoot(t *testing.T) {
	root := newTestRoot(t, true)
	other := newTestRoot(t, true)
	leaf := newTestRoot(t, false)
	cases := []struct {
		name    string
		resName string
		edit    func(*pbca.CARoot)
		want    string
	}{
		{"valid", "", func(*pbca.CARoot) {}, ""},
		{"rotated out", "", func(r *pbca.CARoot) { r.Active, r.RotatedOutAt = false, timestamppb.Now() }, ""},
		{"with its longest leaf TTL", "", func(r *pbca.CARoot) { r.MaxLeafTtl = durationpb.New(72 * time.Hour) }, ""},
		{"a negative longest leaf TTL", "", func(r *pbca.CARoot) { r.MaxLeafTtl = durationpb.New(-time.Hour) }, "data.max_leaf_ttl: -1h0m0s is not a positive duration"},
		{"with intermediates", "", func(r *pbca.CARoot) { r.IntermediateCerts, r.SigningCert = []string{other.certPEM}, other.certPEM }, ""},
		{"another name", "abc", func(*pbca.CARoot) {}, "id.name: must be"},
		{"id not a key id", "", func(r *pbca.CARoot) { r.Id = "abc" }, `data.id: "abc" is not a key id`},
		{"id of another key", "", func(r *pbca.CARoot) { r.Id = other.id }, "id.name: must be"},
		{"no trust domain", "", func(r *pbca.CARoot) { r.TrustDomain = "" }, "data.trust_domain:"},
		{"foreign trust domain", "", func(r *pbca.CARoot) { r.TrustDomain = "example.org" }, `data.trust_domain: "example.org" is not a trust domain`},
		{"no certificate", "", func(r *pbca.CARoot) { r.RootCert = "" }, "data.root_cert: is required"},
		{"certificate not a CA", "", func(r *pbca.CARoot) { r.RootCert = leaf.certPEM }, "data.root_cert: is not a CA certificate"},
		{"two certificates", "", func(r *pbca.CARoot) { r.RootCert += other.certPEM }, "data.root_cert: holds 2 certificates"},
		{"bad intermediate", "", func(r *pbca.CARoot) { r.IntermediateCerts = []string{other.certPEM, "x"} }, "data.intermediate_certs[1]: is not PEM"},
		{"bad signing cert", "", func(r *pbca.CARoot) { r.SigningCert = root.keyPEM }, "data.signing_cert: holds a PEM"},
		{"rsa 1024", "", func(r *pbca.CARoot) { r.PrivateKeyType, r.PrivateKeyBits = "rsa", 1024 }, "data.private_key_bits: 1024 bits"},
		{"no validity", "", func(r *pbca.CARoot) { r.NotAfter = nil }, "data.not_after: and not_before are required"},
		{"ends before it starts", "", func(r *pbca.CARoot) { r.NotAfter = r.NotBefore }, "data.not_after:"},
		{"active and rotated out", "", func(r *pbca.CARoot) { r.RotatedOutAt = timestamppb.Now() }, "data.rotated_out_at: must be unset on the active root"},
		{"no datacenter", "", func(r *pbca.CARoot) { r.Datacenter = "" }, "data.datacenter: is required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := goodRoot(root)
			c.edit(r)
			name := ca.RootName(r.GetId())
			if c.resName != "" {
				name = c.resName
			} else if c.name == "id of another key" {
				name = ca.RootName(root.id)
			}
			if name == "" {
				name = ca.RootName(root.id)
			}
			wantField(t, ca.ValidateRoot(resourceOf(t, ca.RootID(name), r)), c.want, "")
		})
	}
	// A root whose name matches an id that is not its certificate's.
	r := goodRoot(root)
	r.Id = other.id
	wantField(t, ca.ValidateRoot(resourceOf(t, ca.RootID(ca.RootName(other.id)), r)), "data.id: \""+other.id+"\" is not the key id of root_cert", "")
}

func TestValidateSigningKey(t *testing.T) {
	root := newTestRoot(t, true)
	good := func() *pbca.CASigningKey {
		return &pbca.CASigningKey{RootId: root.id, PrivateKey: root.keyPEM, SigningCert: root.certPEM}
	}
	cases := []struct {
		name string
		edit func(*pbca.CASigningKey)
		want string
	}{
		{"valid", func(*pbca.CASigningKey) {}, ""},
		{"no root id", func(k *pbca.CASigningKey) { k.RootId = "" }, "data.root_id:"},
		{"no key", func(k *pbca.CASigningKey) { k.PrivateKey = "" }, "data.private_key: is required"},
		{"key garbled", func(k *pbca.CASigningKey) { k.PrivateKey = strings.Replace(k.PrivateKey, "M", "A", 3) }, "data.private_key: is a PEM PRIVATE KEY block that does not parse"},
		{"two keys", func(k *pbca.CASigningKey) { k.PrivateKey += k.PrivateKey }, "data.private_key: holds more than one PEM block"},
		{"no certificate", func(k *pbca.CASigningKey) { k.SigningCert = "" }, "data.signing_cert: is required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := good()
			c.edit(k)
			wantField(t, ca.ValidateSigningKey(resourceOf(t, ca.SigningKeyID(ca.RootName(root.id)), k)), c.want, root.keyPEM)
		})
	}
	wantField(t, ca.ValidateSigningKey(resourceOf(t, ca.SigningKeyID("other"), good())), "id.name: must be", root.keyPEM)
}

func TestValidateManagerStatus(t *testing.T) {
	root := newTestRoot(t, true)
	cases := []struct {
		st   *pbca.CAManagerStatus
		want string
	}{
		{&pbca.CAManagerStatus{State: ca.StateInitializing}, ""},
		{&pbca.CAManagerStatus{State: ca.StateReady, ActiveRootId: root.id}, ""},
		{&pbca.CAManagerStatus{State: ca.StateFailed, LastError: "x"}, ""},
		{&pbca.CAManagerStatus{State: "sleepy"}, `state: "sleepy" is not a state`},
		{&pbca.CAManagerStatus{State: ca.StateReady}, "active_root_id: is required"},
		{&pbca.CAManagerStatus{State: ca.StateReady, ActiveRootId: "x"}, `active_root_id: "x" is not a key id`},
	}
	for _, c := range cases {
		wantField(t, ca.ValidateManagerStatus(c.st), c.want, "")
	}
}

// Registered in a resource service: the CA's own code writes and reads
// every type; the generic API writes neither the configuration nor roots,
// and never touches a signing key.
func TestRegisteredTypes(t *testing.T) {
	reg := resource.NewRegistry()
	ca.Register(reg)
	svc := resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg})
	ctx := context.Background()
	ops := resource.FromOperations(ctx)
	root := newTestRoot(t, true)
	name := ca.RootName(root.id)

	cfg := resourceOf(t, ca.ConfigID(), &pbca.CAConfig{})
	if _, err := svc.Write(ctx, &pbresource.WriteRequest{Resource: cfg}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "/v1/ca/config") {
		t.Fatalf("generic CAConfig write = %v, want FailedPrecondition naming /v1/ca/config", err)
	}
	out, err := svc.Write(ops, &pbresource.WriteRequest{Resource: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := resource.DecodeData[*pbca.CAConfig](out.GetResource()); c.GetLeafTtl().AsDuration() != ca.DefaultLeafTTL {
		t.Fatalf("stored config %v lacks its defaults", c)
	}
	if _, err := svc.Write(ops, &pbresource.WriteRequest{Resource: resourceOf(t, ca.RootID(name), goodRoot(root))}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Read(ctx, &pbresource.ReadRequest{Id: ca.RootID(name)}); err != nil {
		t.Fatalf("generic root read = %v", err)
	}
	key := resourceOf(t, ca.SigningKeyID(name), &pbca.CASigningKey{RootId: root.id, PrivateKey: root.keyPEM, SigningCert: root.certPEM})
	if _, err := svc.Write(ops, &pbresource.WriteRequest{Resource: key}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Read(ctx, &pbresource.ReadRequest{Id: ca.SigningKeyID(name)}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("generic signing key read = %v, want PermissionDenied", err)
	}
	got, err := svc.Read(ops, &pbresource.ReadRequest{Id: ca.SigningKeyID(name)})
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := resource.DecodeData[*pbca.CASigningKey](got.GetResource()); k.GetPrivateKey() != root.keyPEM {
		t.Fatal("the CA's own read lost the key")
	}
	if _, err := svc.WriteStatus(resource.AsController(ops, ca.ManagerStatusKey), &pbresource.WriteStatusRequest{Id: ca.ConfigID(), Key: ca.ManagerStatusKey, Status: &pbresource.Status{
		Data: mustAny(t, &pbca.CAManagerStatus{State: ca.StateReady, ActiveRootId: root.id})}}); err != nil {
		t.Fatalf("manager status: %v", err)
	}
}

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The CA's types are deleted only by the CA's own code: the generic delete
// refuses the configuration (change it instead), the active root (rotate
// it), a root rotated out (the manager prunes it) and a signing key
// (sealed), and deletes nothing; the manager's own calls delete a root
// rotated out and its key.
func TestGenericDeleteOfCATypes(t *testing.T) {
	reg := resource.NewRegistry()
	ca.Register(reg)
	b := inmem.NewBackend()
	svc := resource.NewService(resource.Config{Backend: b, Registry: reg})
	ctx := context.Background()
	ops := resource.FromOperations(ctx)
	write := func(res *pbresource.Resource) *pbresource.Resource {
		t.Helper()
		out, err := svc.Write(ops, &pbresource.WriteRequest{Resource: res})
		if err != nil {
			t.Fatal(err)
		}
		return out.GetResource()
	}
	cur, prev := newTestRoot(t, true), newTestRoot(t, true)
	rotatedOut := goodRoot(prev)
	rotatedOut.Active, rotatedOut.RotatedOutAt = false, timestamppb.Now()
	stored := []*pbresource.Resource{
		write(resourceOf(t, ca.ConfigID(), &pbca.CAConfig{})),
		write(resourceOf(t, ca.RootID(ca.RootName(cur.id)), goodRoot(cur))),
		write(resourceOf(t, ca.RootID(ca.RootName(prev.id)), rotatedOut)),
		write(resourceOf(t, ca.SigningKeyID(ca.RootName(prev.id)), &pbca.CASigningKey{RootId: prev.id, PrivateKey: prev.keyPEM, SigningCert: prev.certPEM})),
	}
	for i, tc := range []struct {
		code codes.Code
		want []string
	}{
		{codes.FailedPrecondition, []string{"ca/v1/CAConfig is deleted only through its own operations", "never deleted", "PUT /v1/ca/config (trellis ca config set)"}},
		{codes.FailedPrecondition, []string{"ca/v1/CARoot/" + ca.RootName(cur.id) + " is the CA's active root", "never deleted", "rotate to a new root instead (trellis ca rotate"}},
		{codes.FailedPrecondition, []string{"ca/v1/CARoot is deleted only through its own operations", "the CA manager alone deletes a root rotated out", "2 × leaf_ttl after the rotation"}},
		{codes.PermissionDenied, []string{"ca/v1/CASigningKey is sealed"}},
	} {
		res := stored[i]
		for _, req := range []*pbresource.DeleteRequest{{Id: res.GetId()}, {Id: res.GetId(), Version: res.GetVersion()}} {
			_, err := svc.Delete(ctx, req)
			if status.Code(err) != tc.code {
				t.Fatalf("generic delete of %s = %v, want %v", res.GetId().GetName(), err, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(status.Convert(err).Message(), w) {
					t.Errorf("generic delete of %s = %q, want it to say %q", res.GetId().GetName(), status.Convert(err).Message(), w)
				}
			}
		}
	}
	for _, res := range stored {
		got, err := svc.Read(ops, &pbresource.ReadRequest{Id: res.GetId(), Consistent: true})
		if err != nil || got.GetResource().GetVersion() != res.GetVersion() {
			t.Fatalf("after the refused deletes %s is %v, %v; want it unchanged", res.GetId().GetName(), got, err)
		}
	}
	// The CA manager's prune: the key, then the root at its version.
	for _, res := range []*pbresource.Resource{stored[3], stored[2]} {
		if _, err := svc.Delete(ops, &pbresource.DeleteRequest{Id: res.GetId(), Version: res.GetVersion()}); err != nil {
			t.Fatalf("the CA's own delete of %s: %v", res.GetId().GetName(), err)
		}
	}
}

// RefuseActiveRootDelete speaks of the active root only.
func TestRefuseActiveRootDelete(t *testing.T) {
	r := newTestRoot(t, true)
	active := goodRoot(r)
	out := goodRoot(r)
	out.Active = false
	for _, tc := range []struct {
		name string
		res  *pbresource.Resource
		want codes.Code
	}{
		{"active", resourceOf(t, ca.RootID(ca.RootName(r.id)), active), codes.FailedPrecondition},
		{"rotated out", resourceOf(t, ca.RootID(ca.RootName(r.id)), out), codes.OK},
		{"not a root", resourceOf(t, ca.RootID(ca.RootName(r.id)), &pbca.CAConfig{}), codes.OK},
	} {
		if got := status.Code(ca.RefuseActiveRootDelete(tc.res)); got != tc.want {
			t.Errorf("%s: RefuseActiveRootDelete = %v, want %v", tc.name, got, tc.want)
		}
	}
}
