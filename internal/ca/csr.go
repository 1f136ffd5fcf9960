package ca

import (
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Reasons a CSR is refused: short, fixed strings, fit for a metric label.
const (
	ReasonNotPEM       = "not_pem"
	ReasonNotCSR       = "not_csr"
	ReasonBadSignature = "bad_signature"
	ReasonURISANCount  = "uri_san_count"
	ReasonNotSPIFFE    = "not_spiffe"
	ReasonTrustDomain  = "trust_domain"
	ReasonDatacenter   = "datacenter"
	ReasonKeyType      = "key_type"
	ReasonCARequested  = "ca_requested"
	// ReasonServerID: the CSR asks for a server's identity, which only a
	// server signs, for itself (SignServerLeaf).
	ReasonServerID = "server_id"
	// ReasonNotAllowed is for the signing service: the caller's token
	// does not allow it to ask for this identity. CheckCSR never uses it.
	ReasonNotAllowed = "not_allowed"
)

// Fields of a signing request that refusals name.
const (
	FieldCSR           = "csr"
	fieldCSRURISAN     = "csr.uri_san"
	fieldCSRPublicKey  = "csr.public_key"
	fieldCSRExtensions = "csr.extensions"
)

// Refusal is a certificate signing request the CA will not sign: Reason is
// a metric label (one of the Reason constants), Field the part of the
// request at fault, Message the sentence a person reads.
type Refusal struct {
	Reason, Field, Message string
}

func (r *Refusal) Error() string {
	if r.Field == "" {
		return r.Message
	}
	return r.Field + ": " + r.Message
}

// GRPCStatus makes a Refusal an InvalidArgument wherever it travels: it is
// the caller's request that is wrong, and retrying it will not help.
func (r *Refusal) GRPCStatus() *status.Status {
	return status.New(codes.InvalidArgument, r.Error())
}

func refuse(reason, field, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Field: field, Message: fmt.Sprintf(format, args...)}
}

// maxCSRBytes bounds what ParseCSR reads: a CSR of ours is well under 4 KiB
// even with an RSA 4096 key, and a larger one is not worth parsing.
const maxCSRBytes = 64 << 10

// ParseCSR reads one PEM-encoded certificate signing request. It does not
// check the signature: CheckCSR does, with every other check.
func ParseCSR(pemData []byte) (*x509.CertificateRequest, error) {
	if len(pemData) > maxCSRBytes {
		return nil, refuse(ReasonNotPEM, FieldCSR, "it is %d bytes; a CSR is at most %d", len(pemData), maxCSRBytes)
	}
	block, _ := pem.Decode(pemData)
	if block == nil {
		return nil, refuse(ReasonNotPEM, FieldCSR, "it is not PEM")
	}
	if block.Type != pemCertificateRequest && block.Type != pemNewCertRequest {
		return nil, refuse(ReasonNotCSR, FieldCSR, "its PEM block is a %q, not a %q", block.Type, pemCertificateRequest)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, refuse(ReasonNotCSR, FieldCSR, "it does not parse as a certificate request: %v", err)
	}
	return csr, nil
}

// CSRPolicy is what a CSR must match: the CA's trust domain and the
// datacenter of the server that signs.
type CSRPolicy struct {
	TrustDomain, Datacenter string
}

// CheckCSR decides whether the CA signs csr, and for which identity. The
// key is checked before the signature so that an oversized RSA key costs
// nothing to refuse. Only the URI SAN is read: SignLeaf writes every
// name of the leaf itself, so DNS names, addresses or a subject the CSR
// asks for are ignored rather than trusted.
func CheckCSR(csr *x509.CertificateRequest, p CSRPolicy) (Identity, error) {
	if err := checkCSRItself(csr); err != nil {
		return nil, err
	}
	if err := checkNoCARequest(csr); err != nil {
		return nil, err
	}
	if n := len(csr.URIs); n != 1 {
		return nil, refuse(ReasonURISANCount, fieldCSRURISAN, "it has %d URI SANs; it needs exactly one, the SPIFFE id", n)
	}
	id, err := ParseID(csr.URIs[0])
	if err != nil {
		return nil, refuse(ReasonNotSPIFFE, fieldCSRURISAN, "%v", err)
	}
	var td, dc string
	switch v := id.(type) {
	case ServiceID:
		td, dc = v.TrustDomain, v.Datacenter
	case AgentID:
		td, dc = v.TrustDomain, v.Datacenter
	case ServerID:
		// Whatever its trust domain or datacenter: a server identity is
		// never signed on request, or an agent could pass for a server.
		return nil, refuse(ReasonServerID, fieldCSRURISAN, "%s is a server's identity: a server signs its own, with the key it holds, and the CA signs none on request (ask for a service or an agent id)", id)
	}
	if td != p.TrustDomain {
		return nil, refuse(ReasonTrustDomain, fieldCSRURISAN, "%s is of trust domain %q, not this CA's %q", id, td, p.TrustDomain)
	}
	if dc != p.Datacenter {
		return nil, refuse(ReasonDatacenter, fieldCSRURISAN, "%s is of datacenter %q; this server signs for %q", id, dc, p.Datacenter)
	}
	return id, nil
}

// Bounds on an RSA key in a CSR: under 2048 bits is breakable, and over
// 8192 only costs the signer time.
const (
	minRSABits = 2048
	maxRSABits = 8192
)

func checkCSRKey(csr *x509.CertificateRequest) error {
	kt, err := KeyTypeOf(csr.PublicKey)
	if err != nil {
		return refuse(ReasonKeyType, fieldCSRPublicKey, "%v", err)
	}
	return checkLeafKeyType(kt)
}

// checkLeafKeyType accepts ECDSA P-256 and P-384 and RSA of 2048 to 8192
// bits: a client may hold a key of another allowed type than the CA's.
func checkLeafKeyType(kt KeyType) error {
	switch kt.Algorithm {
	case AlgorithmEC:
		if kt.Bits == 256 || kt.Bits == 384 {
			return nil
		}
		return refuse(ReasonKeyType, fieldCSRPublicKey, "an ECDSA key on a %d-bit curve; use P-256 or P-384", kt.Bits)
	case AlgorithmRSA:
		if kt.Bits >= minRSABits && kt.Bits <= maxRSABits {
			return nil
		}
		return refuse(ReasonKeyType, fieldCSRPublicKey, "an RSA key of %d bits; use %d to %d bits", kt.Bits, minRSABits, maxRSABits)
	}
	return refuse(ReasonKeyType, fieldCSRPublicKey, "a %s key is neither ECDSA nor RSA", kt.Algorithm)
}

// oidBasicConstraints is id-ce-basicConstraints (RFC 5280, 4.2.1.9).
var oidBasicConstraints = asn1.ObjectIdentifier{2, 5, 29, 19}

// checkNoCARequest refuses a CSR whose requested extensions ask for a CA
// certificate. SignLeaf would not grant it anyway; refusing says plainly
// that the client is confused or hostile.
func checkNoCARequest(csr *x509.CertificateRequest) error {
	isCA, err := requestedCA(csr)
	if err != nil {
		return refuse(ReasonCARequested, fieldCSRExtensions, "its basicConstraints extension does not parse")
	}
	if isCA {
		return refuse(ReasonCARequested, fieldCSRExtensions, "it asks for a CA certificate (basicConstraints CA=true); the CA signs leaves only")
	}
	return nil
}

// requestedCA reports whether csr's requested extensions ask for a CA
// certificate (basicConstraints CA=true); an error when such an extension
// does not parse.
func requestedCA(csr *x509.CertificateRequest) (bool, error) {
	for _, ext := range csr.Extensions {
		if !ext.Id.Equal(oidBasicConstraints) {
			continue
		}
		var bc struct {
			IsCA       bool `asn1:"optional"`
			MaxPathLen int  `asn1:"optional,default:-1"`
		}
		if rest, err := asn1.Unmarshal(ext.Value, &bc); err != nil || len(rest) != 0 {
			return false, errors.New("basicConstraints does not parse")
		}
		if bc.IsCA {
			return true, nil
		}
	}
	return false, nil
}

// checkCSRItself checks what any CSR the CA signs must be, whatever it
// asks for: present, with a key the CA accepts, signed by that key.
func checkCSRItself(csr *x509.CertificateRequest) error {
	if csr == nil {
		return refuse(ReasonNotCSR, FieldCSR, "no certificate request")
	}
	if err := checkCSRKey(csr); err != nil {
		return err
	}
	if err := csr.CheckSignature(); err != nil {
		return refuse(ReasonBadSignature, FieldCSR, "its signature does not verify with its own key: %v", err)
	}
	return nil
}
