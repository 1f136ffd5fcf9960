package camodule

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"sort"
	"time"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/resource"
)

// signingState is what a server signs with: the active root's signing
// certificate and key, parsed once, the chain a leaf carries, and the
// CAConfig's settings for leaves. A value never changes once built; the
// signer swaps in a new one when the stored CA changes.
type signingState struct {
	rootID, rootName, trustDomain string
	signer                        ca.Signer
	// issuer signs leaves with signer; selfCheck records the checks of
	// its leaves (selfcheck.go). Both belong to the parsed key: a state
	// rebuilt for a change of the configuration alone keeps them.
	issuer       *ca.LeafIssuer
	selfCheck    *selfCheck
	chainPEM     string
	leafTTL      time.Duration
	limits       Limits
	rootNotAfter time.Time
	// signingNotAfter is the signing certificate's expiry when it is not
	// the root itself (zero otherwise).
	signingNotAfter time.Time
	// intermediateTTL is the life of an intermediate the primary signs
	// for a secondary datacenter (the CAConfig's intermediate_ttl).
	intermediateTTL time.Duration

	// The versions it was parsed from: the key is parsed again only
	// when one of them changes.
	rootVersion, keyVersion string
}

// errNoActiveRoot: the CA manager has not made the cluster's root yet.
var errNoActiveRoot = errors.New("the CA has no active root yet: the leader's CA manager makes it (see GET /v1/ca/config for its state)")

// errNoKeyYet: the active root's signing key is not stored (replicated)
// yet. A root and its key are written together, but each type has its
// own watch, so a server may see the root a moment before the key.
var errNoKeyYet = errors.New("has no signing key stored yet")

// caView is the stored CA as a server sees it: every CARoot, every
// CASigningKey (by name), the CAConfig (nil when none is stored).
type caView struct {
	roots  []*pbresource.Resource
	keys   map[string]*pbresource.Resource
	config *pbresource.Resource
}

// buildSigningState decides what to sign with from view: the active
// root, its signing key and the configuration. prev, the state in use, is
// reused when the root and its key have not changed, so that a change of
// the configuration alone parses no key. It returns errNoActiveRoot when
// no root is active, and an error naming the fault when the active root
// cannot sign (its key missing or not its own).
func buildSigningState(view caView, prev *signingState) (*signingState, error) {
	cfg := &pbca.CAConfig{}
	if view.config != nil {
		c, err := resource.DecodeData[*pbca.CAConfig](view.config)
		if err != nil {
			return nil, fmt.Errorf("decode the CA configuration: %w", err)
		}
		cfg = c
	}
	ca.FillConfigDefaults(cfg)

	rootRes, root, err := activeRootOf(view.roots)
	if err != nil {
		return nil, err
	}
	name := rootRes.GetId().GetName()
	keyRes := view.keys[name]
	if keyRes == nil {
		return nil, fmt.Errorf("the active root %s %w", root.GetId(), errNoKeyYet)
	}
	st := &signingState{}
	if prev != nil && prev.rootName == name && prev.rootVersion == rootRes.GetVersion() && prev.keyVersion == keyRes.GetVersion() {
		*st = *prev
	} else if st, err = parseSigner(rootRes, root, keyRes); err != nil {
		return nil, err
	}
	st.leafTTL = cfg.GetLeafTtl().AsDuration()
	st.intermediateTTL = cfg.GetIntermediateTtl().AsDuration()
	st.limits = Limits{PerSecond: cfg.GetCsrMaxPerSecond(), Concurrent: int(cfg.GetCsrMaxConcurrent())}
	return st, nil
}

// activeRootOf finds the one active root. Two active roots would be a
// bug of the manager; the newest by not-before wins, so that every
// server picks the same.
func activeRootOf(list []*pbresource.Resource) (*pbresource.Resource, *pbca.CARoot, error) {
	type active struct {
		res  *pbresource.Resource
		root *pbca.CARoot
	}
	var found []active
	for _, res := range list {
		r, err := resource.DecodeData[*pbca.CARoot](res)
		if err != nil {
			return nil, nil, fmt.Errorf("decode the CA root %s: %w", res.GetId().GetName(), err)
		}
		if r.GetActive() {
			found = append(found, active{res, r})
		}
	}
	if len(found) == 0 {
		return nil, nil, errNoActiveRoot
	}
	sort.SliceStable(found, func(i, j int) bool {
		return found[i].root.GetNotBefore().AsTime().After(found[j].root.GetNotBefore().AsTime())
	})
	return found[0].res, found[0].root, nil
}

// parseSigner parses the active root's signing material. The signing
// certificate is the key's (the root, or an intermediate under it); the
// chain a leaf carries is that certificate when it is not the root, then
// the root's intermediates (the cross-signed root after a rotation).
func parseSigner(rootRes *pbresource.Resource, root *pbca.CARoot, keyRes *pbresource.Resource) (*signingState, error) {
	key, err := resource.DecodeData[*pbca.CASigningKey](keyRes)
	if err != nil {
		return nil, fmt.Errorf("decode the signing key of root %s: %w", root.GetId(), err)
	}
	if key.GetRootId() != root.GetId() {
		return nil, fmt.Errorf("the signing key stored for root %s is for root %q", root.GetId(), key.GetRootId())
	}
	rootCerts, err := ca.ParseCerts([]byte(root.GetRootCert()))
	if err != nil {
		return nil, fmt.Errorf("root %s: root_cert: %w", root.GetId(), err)
	}
	signingPEM := key.GetSigningCert()
	if signingPEM == "" {
		signingPEM = root.GetSigningCert()
	}
	if signingPEM == "" {
		signingPEM = root.GetRootCert()
	}
	signingCerts, err := ca.ParseCerts([]byte(signingPEM))
	if err != nil {
		return nil, fmt.Errorf("root %s: signing_cert: %w", root.GetId(), err)
	}
	// Never the key's text or the parser's view of it in an error.
	k, err := ca.ParseKey([]byte(key.GetPrivateKey()))
	if err != nil {
		return nil, fmt.Errorf("the signing key of root %s does not parse", root.GetId())
	}
	rootCert, signing := rootCerts[0], signingCerts[0]
	var chain []*x509.Certificate
	isRoot := signing.Equal(rootCert)
	if !isRoot {
		chain = append(chain, signing)
	}
	for i, p := range root.GetIntermediateCerts() {
		certs, err := ca.ParseCerts([]byte(p))
		if err != nil {
			return nil, fmt.Errorf("root %s: intermediate_certs[%d]: %w", root.GetId(), i, err)
		}
		for _, c := range certs {
			if !c.Equal(signing) {
				chain = append(chain, c)
			}
		}
	}
	st := &signingState{
		rootID: root.GetId(), rootName: rootRes.GetId().GetName(), trustDomain: root.GetTrustDomain(),
		signer:       ca.Signer{Cert: signing, Key: k, Chain: chain},
		chainPEM:     string(ca.EncodeCerts(chain...)),
		rootNotAfter: rootCert.NotAfter,
		rootVersion:  rootRes.GetVersion(), keyVersion: keyRes.GetVersion(),
	}
	if !isRoot {
		st.signingNotAfter = signing.NotAfter
	}
	if err := checkSigner(st.signer); err != nil {
		return nil, fmt.Errorf("root %s: %w", root.GetId(), err)
	}
	if st.issuer, err = ca.NewLeafIssuer(st.signer); err != nil {
		return nil, fmt.Errorf("root %s: %w", root.GetId(), err)
	}
	st.selfCheck = &selfCheck{}
	return st, nil
}

// checkSigner refuses a key that is not the signing certificate's: a
// server must not sign leaves that no peer will verify.
func checkSigner(s ca.Signer) error {
	pub, err := x509.MarshalPKIXPublicKey(s.Key.Public())
	if err != nil {
		return errors.New("the signing key's public key does not encode")
	}
	if !bytes.Equal(pub, s.Cert.RawSubjectPublicKeyInfo) {
		return errors.New("the signing key is not the signing certificate's")
	}
	return nil
}
