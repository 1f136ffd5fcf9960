package ca

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/resource"
)

// The checks on the CA's types. Every refusal is a resource.FieldError
// naming the field; none ever quotes a private key, only says what is
// wrong with it.

// keyBits are the key sizes each key type allows.
var keyBits = map[string][]int32{"ec": {256, 384}, "rsa": {2048, 4096}}

// defaultKeyBits is the size a key type gets when none is given.
var defaultKeyBits = map[string]int32{"ec": DefaultPrivateKeyBits, "rsa": 2048}

// FillConfigDefaults fills in c's unset settings: provider builtin, an
// ECDSA P-256 key (or the default size of the key type given), the TTLs
// and the signing limits. It leaves the settings given as they are.
func FillConfigDefaults(c *pbca.CAConfig) {
	if c.GetProvider() == "" {
		c.Provider = ProviderBuiltin
	}
	if c.GetPrivateKeyType() == "" {
		c.PrivateKeyType = DefaultPrivateKeyType
	}
	if c.GetPrivateKeyBits() == 0 {
		c.PrivateKeyBits = defaultKeyBits[c.GetPrivateKeyType()]
	}
	if c.GetLeafTtl() == nil {
		c.LeafTtl = durationpb.New(DefaultLeafTTL)
	}
	if c.GetIntermediateTtl() == nil {
		c.IntermediateTtl = durationpb.New(DefaultIntermediateTTL)
	}
	if c.GetRootTtl() == nil {
		c.RootTtl = durationpb.New(DefaultRootTTL)
	}
	if c.GetCsrMaxPerSecond() == 0 {
		c.CsrMaxPerSecond = DefaultCSRMaxPerSecond
	}
	if c.GetCsrMaxConcurrent() == 0 {
		c.CsrMaxConcurrent = DefaultCSRMaxConcurrent
	}
}

// MutateConfig is the Mutate hook of CAConfig: FillConfigDefaults.
func MutateConfig(res *pbresource.Resource) error {
	return resource.MutateData(res, FillConfigDefaults)
}

// ValidateConfig is the Validate hook of CAConfig: the stored settings.
// A stored CAConfig never holds a private key: the CA's route takes a
// supplied one out before it writes (see ValidateConfigRequest).
func ValidateConfig(res *pbresource.Resource) error {
	if name := res.GetId().GetName(); name != ConfigName {
		return resource.NewFieldError("id.name", "must be %q: the CA has one configuration (got %q)", ConfigName, name)
	}
	c, err := resource.DecodeData[*pbca.CAConfig](res)
	if err != nil {
		return err
	}
	if c.GetPrivateKey() != "" {
		return resource.NewFieldError("data.private_key", "is write-only and never stored here: give it to /v1/ca/config, which keeps it sealed")
	}
	return withData(checkSettings(c))
}

// ValidateConfigRequest checks a configuration as a person gives it to the
// CA's route, after FillConfigDefaults: the settings, and a supplied root
// given whole (root_cert and private_key both, or neither). checkRoot is
// the cryptographic check of a supplied root (its key matches its
// certificate, it is a CA, it is valid now and outlives leaf_ttl); the
// route passes ca.CheckSuppliedRoot. It takes the check as an argument
// because that check needs the time, which a route has and a pure
// validator does not. Fields are named without "data." (the request is the message itself).
func ValidateConfigRequest(c *pbca.CAConfig, checkRoot func(certPEM, keyPEM []byte) error) error {
	if err := checkSettings(c); err != nil {
		return err
	}
	switch {
	case c.GetRootCert() != "" && c.GetPrivateKey() == "":
		return resource.NewFieldError("private_key", "is required with root_cert: a supplied root comes with its key")
	case c.GetRootCert() == "" && c.GetPrivateKey() != "":
		return resource.NewFieldError("root_cert", "is required with private_key: a supplied key comes with its root certificate")
	case c.GetPrivateKey() != "":
		if _, err := parsePrivateKey(c.GetPrivateKey()); err != nil {
			return resource.NewFieldError("private_key", "%v", err)
		}
		if checkRoot != nil {
			return checkRoot([]byte(c.GetRootCert()), []byte(c.GetPrivateKey()))
		}
	}
	return nil
}

// checkSettings checks what a CAConfig sets, wherever it is written.
func checkSettings(c *pbca.CAConfig) error {
	if c.GetProvider() != ProviderBuiltin {
		return resource.NewFieldError("provider", "%q is not a provider: the only one is %q", c.GetProvider(), ProviderBuiltin)
	}
	if err := checkKeyType("private_key_type", "private_key_bits", c.GetPrivateKeyType(), c.GetPrivateKeyBits()); err != nil {
		return err
	}
	leaf, err := ttl("leaf_ttl", c.GetLeafTtl())
	if err != nil {
		return err
	}
	inter, err := ttl("intermediate_ttl", c.GetIntermediateTtl())
	if err != nil {
		return err
	}
	root, err := ttl("root_ttl", c.GetRootTtl())
	if err != nil {
		return err
	}
	switch {
	case leaf < MinLeafTTL:
		return resource.NewFieldError("leaf_ttl", "%s is under the minimum of %s", leaf, MinLeafTTL)
	case leaf > root:
		return resource.NewFieldError("leaf_ttl", "%s is over root_ttl (%s): no leaf outlives its root", leaf, root)
	case inter <= leaf:
		return resource.NewFieldError("intermediate_ttl", "%s must be over leaf_ttl (%s): an intermediate outlives the leaves it signs", inter, leaf)
	case inter > root:
		return resource.NewFieldError("intermediate_ttl", "%s is over root_ttl (%s): no intermediate outlives its root", inter, root)
	}
	if r := c.GetCsrMaxPerSecond(); r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		return resource.NewFieldError("csr_max_per_second", "%v is not a rate: give a positive number, or 0 for the default (%d)", r, DefaultCSRMaxPerSecond)
	}
	if n := c.GetCsrMaxConcurrent(); n < 0 {
		return resource.NewFieldError("csr_max_concurrent", "%d is negative: give a positive number, or 0 for the default (%d)", n, DefaultCSRMaxConcurrent)
	}
	if pemText := c.GetRootCert(); pemText != "" {
		certs, err := parseCertificates(pemText)
		if err != nil {
			return resource.NewFieldError("root_cert", "%v", err)
		}
		if !certs[0].IsCA {
			return resource.NewFieldError("root_cert", "is not a CA certificate (basic constraints CA:FALSE or absent)")
		}
	}
	return nil
}

// checkKeyType checks a key type and size pair.
func checkKeyType(typeField, bitsField, typ string, bits int32) error {
	allowed, ok := keyBits[typ]
	if !ok {
		return resource.NewFieldError(typeField, "%q is not a key type: give \"ec\" or \"rsa\"", typ)
	}
	for _, b := range allowed {
		if bits == b {
			return nil
		}
	}
	return resource.NewFieldError(bitsField, "%d bits is not a size for a %s key: give %d or %d", bits, typ, allowed[0], allowed[1])
}

// ttl checks a duration that must be given and positive.
func ttl(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, resource.NewFieldError(field, "is required")
	}
	if err := d.CheckValid(); err != nil {
		return 0, resource.NewFieldError(field, "is not a valid duration: %v", err)
	}
	v := d.AsDuration()
	if v <= 0 {
		return 0, resource.NewFieldError(field, "%s is not a positive duration", v)
	}
	return v, nil
}

// ValidateManagerStatus checks the CA manager's status payload.
func ValidateManagerStatus(m proto.Message) error {
	st, ok := m.(*pbca.CAManagerStatus)
	if !ok {
		return resource.NewFieldError("", "is a %T, not a CAManagerStatus", m)
	}
	switch st.GetState() {
	case StateInitializing, StateReady, StateFailed:
	default:
		return resource.NewFieldError("state", "%q is not a state: give %q, %q or %q", st.GetState(), StateInitializing, StateReady, StateFailed)
	}
	if id := st.GetActiveRootId(); id != "" && !isKeyID(id) {
		return resource.NewFieldError("active_root_id", "%q is not a key id: want 32 pairs of lowercase hex digits joined by ':'", id)
	}
	if st.GetState() == StateReady && st.GetActiveRootId() == "" {
		return resource.NewFieldError("active_root_id", "is required when the state is %q", StateReady)
	}
	return nil
}

// ValidateRoot is the Validate hook of CARoot. Its root certificate must
// be a CA whose key id is the root's id, and the name the id's RootName.
func ValidateRoot(res *pbresource.Resource) error {
	r, err := resource.DecodeData[*pbca.CARoot](res)
	if err != nil {
		return err
	}
	if !isKeyID(r.GetId()) {
		return resource.NewFieldError("data.id", "%q is not a key id: want 32 pairs of lowercase hex digits joined by ':', as ca.KeyID prints", r.GetId())
	}
	if want := RootName(r.GetId()); res.GetId().GetName() != want {
		return resource.NewFieldError("id.name", "must be %q, the first %d hex digits of data.id (got %q)", want, rootNameLength, res.GetId().GetName())
	}
	return withData(checkRoot(r))
}

func checkRoot(r *pbca.CARoot) error {
	if td := r.GetTrustDomain(); !isTrustDomain(td) {
		return resource.NewFieldError("trust_domain", "%q is not a trust domain: want \"<cluster-id>.trellis\", the cluster id a uuid", td)
	}
	if r.GetRootCert() == "" {
		return resource.NewFieldError("root_cert", "is required")
	}
	certs, err := parseCertificates(r.GetRootCert())
	if err != nil {
		return resource.NewFieldError("root_cert", "%v", err)
	}
	root := certs[0]
	if len(certs) > 1 {
		return resource.NewFieldError("root_cert", "holds %d certificates: give the root alone, and the others in intermediate_certs", len(certs))
	}
	if !root.IsCA {
		return resource.NewFieldError("root_cert", "is not a CA certificate")
	}
	if got, err := KeyID(root.PublicKey); err != nil || got != r.GetId() {
		return resource.NewFieldError("id", "%q is not the key id of root_cert (%s)", r.GetId(), got)
	}
	for i, p := range r.GetIntermediateCerts() {
		if _, err := parseCertificates(p); err != nil {
			return resource.NewFieldError("intermediate_certs["+strconv.Itoa(i)+"]", "%v", err)
		}
	}
	if p := r.GetSigningCert(); p != "" {
		if _, err := parseCertificates(p); err != nil {
			return resource.NewFieldError("signing_cert", "%v", err)
		}
	}
	if err := checkKeyType("private_key_type", "private_key_bits", r.GetPrivateKeyType(), r.GetPrivateKeyBits()); err != nil {
		return err
	}
	nb, na := r.GetNotBefore(), r.GetNotAfter()
	if nb == nil || na == nil {
		return resource.NewFieldError("not_after", "and not_before are required: the root certificate's validity")
	}
	if !na.AsTime().After(nb.AsTime()) {
		return resource.NewFieldError("not_after", "%s is not after not_before (%s)", na.AsTime().Format(time.RFC3339), nb.AsTime().Format(time.RFC3339))
	}
	if d := r.GetMaxLeafTtl(); d != nil {
		if _, err := ttl("max_leaf_ttl", d); err != nil {
			return err
		}
	}
	if r.GetActive() && r.GetRotatedOutAt() != nil {
		return resource.NewFieldError("rotated_out_at", "must be unset on the active root: only a root rotated out has one")
	}
	if err := resource.ValidateName("datacenter", r.GetDatacenter()); err != nil {
		return err
	}
	return nil
}

// ValidateSigningKey is the Validate hook of the sealed CASigningKey. Its
// refusals reach only the CA's own code, yet they never quote the key.
func ValidateSigningKey(res *pbresource.Resource) error {
	k, err := resource.DecodeData[*pbca.CASigningKey](res)
	if err != nil {
		return err
	}
	if !isKeyID(k.GetRootId()) {
		return resource.NewFieldError("data.root_id", "%q is not a key id: want 32 pairs of lowercase hex digits joined by ':'", k.GetRootId())
	}
	if want := RootName(k.GetRootId()); res.GetId().GetName() != want {
		return resource.NewFieldError("id.name", "must be %q, the name of its root (got %q)", want, res.GetId().GetName())
	}
	if k.GetPrivateKey() == "" {
		return resource.NewFieldError("data.private_key", "is required")
	}
	if _, err := parsePrivateKey(k.GetPrivateKey()); err != nil {
		return resource.NewFieldError("data.private_key", "%v", err)
	}
	if k.GetSigningCert() == "" {
		return resource.NewFieldError("data.signing_cert", "is required")
	}
	if _, err := parseCertificates(k.GetSigningCert()); err != nil {
		return resource.NewFieldError("data.signing_cert", "%v", err)
	}
	return nil
}

// withData re-roots a FieldError of the data's fields under "data".
func withData(err error) error {
	if fe, ok := err.(*resource.FieldError); ok {
		return resource.NewFieldError("data."+fe.Field, "%s", fe.Reason)
	}
	return err
}

// isKeyID reports whether s is a SHA-256 key id as ca.KeyID prints it:
// 32 pairs of lowercase hex digits joined by ':'.
func isKeyID(s string) bool {
	if len(s) != 32*3-1 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if i%3 == 2 {
			if c != ':' {
				return false
			}
			continue
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// isTrustDomain reports whether td is "<uuid>.trellis".
func isTrustDomain(td string) bool {
	const suffix = ".trellis"
	return len(td) > len(suffix) && td[len(td)-len(suffix):] == suffix && core.IsUUID(td[:len(td)-len(suffix)])
}

// parseCertificates parses one or more PEM CERTIFICATE blocks and nothing
// else.
func parseCertificates(text string) ([]*x509.Certificate, error) {
	rest := []byte(text)
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != pemCertificate {
			return nil, fmt.Errorf("holds a PEM %q block: only CERTIFICATE blocks belong here", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d does not parse: %v", len(out)+1, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("is not PEM: no CERTIFICATE block")
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, fmt.Errorf("has text after its last PEM block")
	}
	return out, nil
}

// parsePrivateKey parses a PEM private key (PKCS #8, SEC 1 or PKCS #1).
// Its errors never quote the key.
func parsePrivateKey(text string) (any, error) {
	block, rest := pem.Decode([]byte(text))
	if block == nil {
		return nil, fmt.Errorf("is not PEM: no private key block")
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, fmt.Errorf("holds more than one PEM block: give the key alone")
	}
	key, isKey, err := decodeKeyBlock(block)
	if !isKey {
		return nil, fmt.Errorf("is a PEM %q block, not a private key", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("is a PEM %s block that does not parse", block.Type)
	}
	return key, nil
}
