package ca

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"time"

	pbca "trellis.dev/trellis/api/ca/v1"
	"trellis.dev/trellis/internal/resource"
)

// Secondary datacenters: a secondary's leader asks the primary to sign an
// intermediate CA for a key of its own, and signs its leaves with it, so
// that they chain to the primary's root. What each side decides is here,
// from plain values: the CSR the secondary sends (NewIntermediateCSR), the
// primary's checks of it (CheckIntermediateCSR), the secondary's checks of
// what the primary answers (CheckPrimaryRoots, CheckIntermediate), and
// when the secondary needs a new intermediate (IntermediateReason).

// Reasons and fields of the refusals of an intermediate's request.
const (
	// ReasonNotCARequest: a CSR sent for an intermediate does not ask for
	// a CA certificate (a leaf's CSR sent to the wrong method).
	ReasonNotCARequest = "not_ca_request"
	// FieldDatacenter is the datacenter a request for an intermediate
	// names.
	FieldDatacenter = "datacenter"
)

// NewIntermediateCSR makes the CSR a secondary datacenter's leader sends
// the primary for key: a CA request (basicConstraints CA=true) whose one
// URI SAN is the trust domain's spiffe://<td> and whose subject names the
// datacenter.
func NewIntermediateCSR(key crypto.Signer, trustDomain, datacenter string) ([]byte, error) {
	if err := CheckTrustDomain(trustDomain); err != nil {
		return nil, fmt.Errorf("trust domain: %w", err)
	}
	if !resource.IsDNSLabel(datacenter) {
		return nil, fmt.Errorf("datacenter: %q is not a lower-case DNS label", datacenter)
	}
	bc, err := asn1.Marshal(struct {
		IsCA bool `asn1:"optional"`
	}{IsCA: true})
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:         pkix.Name{CommonName: "Trellis intermediate CA of " + datacenter},
		URIs:            []*url.URL{TrustDomainURI(trustDomain)},
		ExtraExtensions: []pkix.Extension{{Id: oidBasicConstraints, Critical: true, Value: bc}},
	}, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemCertificateRequest, Bytes: der}), nil
}

// IntermediatePolicy is what the request of a secondary's intermediate
// must match at the primary: the primary's trust domain, and a
// datacenter other than the primary's own.
type IntermediatePolicy struct {
	TrustDomain, PrimaryDatacenter string
}

// CheckIntermediateCSR decides whether the primary signs an intermediate
// CA for the secondary datacenter named datacenter with csr: the
// datacenter is a lower-case DNS label other than the primary's, and csr
// is itself sound (CheckCSR's checks of its key and signature), asks for a
// CA certificate, and names as its one URI SAN the primary's trust domain
// (the whole federation has one). Each refusal is a *Refusal naming the
// field.
func CheckIntermediateCSR(csr *x509.CertificateRequest, datacenter string, p IntermediatePolicy) error {
	if err := CheckSecondaryDatacenter(datacenter, p.PrimaryDatacenter); err != nil {
		return err
	}
	if err := checkCSRItself(csr); err != nil {
		return err
	}
	if !requestsCA(csr) {
		return refuse(ReasonNotCARequest, fieldCSRExtensions, "it does not ask for a CA certificate (basicConstraints CA=true): an intermediate's CSR does")
	}
	if n := len(csr.URIs); n != 1 {
		return refuse(ReasonURISANCount, fieldCSRURISAN, "it has %d URI SANs; an intermediate's CSR has exactly one, spiffe://%s", n, p.TrustDomain)
	}
	u := csr.URIs[0]
	if u.Scheme != "spiffe" || u.Path != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || CheckTrustDomain(u.Host) != nil {
		return refuse(ReasonNotSPIFFE, fieldCSRURISAN, "%q is not a trust domain's spiffe://<td>", u.String())
	}
	if u.Host != p.TrustDomain {
		return refuse(ReasonTrustDomain, fieldCSRURISAN, "it asks for trust domain %q; the primary's is %q (a secondary takes the primary's)", u.Host, p.TrustDomain)
	}
	return nil
}

// CheckSecondaryDatacenter refuses, naming the datacenter field, a
// request for an intermediate that names no datacenter, one that is not a
// datacenter's name, or the primary's own.
func CheckSecondaryDatacenter(datacenter, primary string) error {
	switch {
	case datacenter == "":
		return refuse(ReasonDatacenter, FieldDatacenter, "missing: name the secondary datacenter the intermediate is for")
	case !resource.IsDNSLabel(datacenter):
		return refuse(ReasonDatacenter, FieldDatacenter, "%q is not a datacenter name (a lower-case DNS label)", datacenter)
	case datacenter == primary:
		return refuse(ReasonDatacenter, FieldDatacenter, "%q is the primary's own datacenter: only a secondary datacenter gets an intermediate", datacenter)
	}
	return nil
}

// requestsCA reports whether csr asks for a CA certificate; one whose
// basicConstraints does not parse does not.
func requestsCA(csr *x509.CertificateRequest) bool {
	isCA, err := requestedCA(csr)
	return err == nil && isCA
}

// ErrNotPrimary is wrapped by the errors that say the address a secondary
// was given answers, but not as the primary it was told of: its roots
// are not a primary's, or it refuses to sign intermediates.
var ErrNotPrimary = errors.New("not the primary datacenter's CA")

// CheckPrimaryRoots checks the roots a server given as the primary's
// answered with: one active root, each root's certificate its id's, one
// trust domain, every root made in primaryDC. It returns the active root.
// An empty list is not a refusal of the server (the primary may not have
// made its root yet); every other fault wraps ErrNotPrimary.
func CheckPrimaryRoots(roots []*pbca.CARoot, primaryDC string) (*pbca.CARoot, error) {
	if len(roots) == 0 {
		return nil, errors.New("the primary has no CA root yet (its leader makes one when it starts)")
	}
	var active *pbca.CARoot
	td := roots[0].GetTrustDomain()
	for _, r := range roots {
		if dc := r.GetDatacenter(); dc != primaryDC {
			return nil, fmt.Errorf("%w: its root %s was made in datacenter %q, not in the primary %q", ErrNotPrimary, r.GetId(), dc, primaryDC)
		}
		if r.GetTrustDomain() != td || CheckTrustDomain(td) != nil {
			return nil, fmt.Errorf("%w: its roots are of trust domains %q and %q; a primary's have one", ErrNotPrimary, td, r.GetTrustDomain())
		}
		certs, err := ParseCerts([]byte(r.GetRootCert()))
		if err != nil {
			return nil, fmt.Errorf("%w: its root %s: root_cert: %v", ErrNotPrimary, r.GetId(), err)
		}
		if id, err := KeyID(certs[0].PublicKey); err != nil || id != r.GetId() || !certs[0].IsCA {
			return nil, fmt.Errorf("%w: its root %s: root_cert is not a CA certificate of that key id", ErrNotPrimary, r.GetId())
		}
		if r.GetActive() {
			if active != nil {
				return nil, fmt.Errorf("%w: it has two active roots, %s and %s", ErrNotPrimary, active.GetId(), r.GetId())
			}
			active = r
		}
	}
	if active == nil {
		return nil, errors.New("the primary has no active CA root (a rotation in progress, or its CA failed: see its GET /v1/ca/config)")
	}
	return active, nil
}

// CheckIntermediate checks what the primary answered to a request for an
// intermediate CA for the key pub: certPEM is one CA certificate of that
// key, and with chainPEM (what comes between it and root) it verifies up
// to root at now. It returns the intermediate and the chain.
func CheckIntermediate(certPEM, chainPEM []byte, pub crypto.PublicKey, root *x509.Certificate, now time.Time) (*x509.Certificate, []*x509.Certificate, error) {
	certs, err := ParseCerts(certPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("cert_pem: %w", err)
	}
	if len(certs) != 1 {
		return nil, nil, fmt.Errorf("cert_pem: it holds %d certificates, not the intermediate alone", len(certs))
	}
	inter := certs[0]
	if !inter.IsCA {
		return nil, nil, errors.New("cert_pem: it is not a CA certificate")
	}
	if !samePublicKey(pub, inter.PublicKey) {
		return nil, nil, errors.New("cert_pem: it is not a certificate of the key the CSR was for")
	}
	var chain []*x509.Certificate
	if len(chainPEM) > 0 {
		if chain, err = ParseCerts(chainPEM); err != nil {
			return nil, nil, fmt.Errorf("chain_pem: %w", err)
		}
	}
	roots, inters := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(root)
	for _, c := range chain {
		inters.AddCert(c)
	}
	opts := x509.VerifyOptions{Roots: roots, Intermediates: inters, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	if _, err := inter.Verify(opts); err != nil {
		return nil, nil, fmt.Errorf("cert_pem: it does not verify up to the primary's active root: %w", err)
	}
	return inter, chain, nil
}

// IntermediateReason says why a secondary needs a new intermediate at
// now, or "" when the one it has will do: it has none; the primary's
// active root (primaryActiveID) is not the one the secondary signs under
// (localActiveID), as after a rotation in the primary; the intermediate
// is not signed by that root's certificate (primaryActive); or it is past
// half its life (RenewAt), which leaves the other half to reach the
// primary in.
func IntermediateReason(primaryActiveID string, primaryActive *x509.Certificate, localActiveID string, intermediate *x509.Certificate, now time.Time) string {
	switch {
	case intermediate == nil:
		return "this datacenter has no intermediate yet"
	case primaryActiveID != localActiveID:
		return fmt.Sprintf("the primary's active root is %s, not %s", primaryActiveID, localActiveID)
	case primaryActive == nil || intermediate.CheckSignatureFrom(primaryActive) != nil:
		return fmt.Sprintf("the intermediate is not signed by the active root %s", primaryActiveID)
	}
	if at := RenewAt(intermediate.NotBefore, intermediate.NotAfter); !now.Before(at) {
		return fmt.Sprintf("the intermediate is past half its life (renewal due at %s)", at.UTC().Format(time.RFC3339))
	}
	return ""
}

// ErrNotServerOfDatacenter is wrapped by CheckIntermediateCaller's
// refusals: the caller is not a server of the datacenter whose
// intermediate it asks for.
var ErrNotServerOfDatacenter = errors.New("not a server of the datacenter asked for")

// CheckIntermediateCaller decides whether a caller may have the
// intermediate of datacenter: only a server of that datacenter, which is
// what the certificate it presented on the server-to-server port proved
// (callerDC: the datacenter of its server.<dc>.trellis or its Connect
// server id). A server of dc2 does not get dc3's intermediate, nor the
// primary's own servers any. A plaintext port proves nothing (plaintext:
// the primary's servers run without TLS files, and warn that their
// server ports are open to anyone); the caller is then taken at its word.
func CheckIntermediateCaller(callerDC string, plaintext bool, datacenter string) error {
	switch {
	case plaintext:
		return nil
	case callerDC == "":
		return fmt.Errorf("%w: the caller presented no server certificate", ErrNotServerOfDatacenter)
	case callerDC != datacenter:
		return fmt.Errorf("%w: the caller is a server of datacenter %q, and asks for the intermediate of %q: a datacenter's servers get their own datacenter's intermediate only",
			ErrNotServerOfDatacenter, callerDC, datacenter)
	}
	return nil
}
