package ca

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// The leaf encoder: the CA's own writer of the one kind of certificate it
// signs by the thousand, leaves.
//
// x509.CreateCertificate, which makes every other certificate here,
// verifies each signature it has just made (a guard against a faulty
// crypto.Signer such as a broken HSM), which costs a P-256 leaf an ECDSA
// verification: 115 µs on a 2-core test machine, where the signature
// itself takes 41 µs and the CSR's own verification, which no leaf may
// skip, another 115 µs. It also encodes the whole template with
// reflection at each call. A LeafIssuer encodes what every leaf of one
// signing key shares (issuer, algorithm, key usages, basic constraints,
// authority key id) once, writes the rest of each leaf by hand in DER,
// and signs it with the key through crypto.Signer: the hash and the
// signature are Go's, only the byte layout is ours. Its output is the
// certificate CreateCertificate would make from the template SignLeaf
// used to hand it, byte for byte up to the signature (leaf_test.go
// checks that for every key type the CA signs with).
//
// What it skips, the check of its own signature, is done by the caller:
// SignLeaf checks every leaf (Check), and the signing service checks the
// first leaf of each key and a sample after (camodule).

// Object identifiers of a leaf.
var (
	oidExtKeyUsage         = asn1.ObjectIdentifier{2, 5, 29, 15}
	oidExtExtKeyUsage      = asn1.ObjectIdentifier{2, 5, 29, 37}
	oidExtBasicConstraints = oidBasicConstraints
	oidExtAuthorityKeyID   = asn1.ObjectIdentifier{2, 5, 29, 35}
	oidExtSubjectAltName   = asn1.ObjectIdentifier{2, 5, 29, 17}
	oidServerAuth          = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 1}
	oidClientAuth          = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 2}
	oidCommonName          = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidECDSAWithSHA256     = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 2}
	oidECDSAWithSHA384     = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 3}
	oidECDSAWithSHA512     = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 4}
	oidSHA256WithRSA       = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 11}
)

// DER fragments every leaf has, encoded once.
var (
	// derVersion3 is [0] EXPLICIT INTEGER 2: an X.509 v3 certificate.
	derVersion3 = []byte{tagExplicit0, 3, tagInteger, 1, 2}
	// derCommonName and derSubjectAltName are the OIDs, tag and length
	// included.
	derCommonName     = mustMarshal(oidCommonName)
	derSubjectAltName = mustMarshal(oidExtSubjectAltName)
	// derLeafExtensions are the extensions that are the same in every
	// leaf, in the order CreateCertificate writes them: key usage
	// (critical: digital signature, key encipherment), extended key
	// usage (server and client authentication), basic constraints
	// (critical, CA false).
	derLeafExtensions = bytes.Join([][]byte{
		mustMarshal(pkix.Extension{Id: oidExtKeyUsage, Critical: true, Value: mustMarshal(leafKeyUsage())}),
		mustMarshal(pkix.Extension{Id: oidExtExtKeyUsage, Value: mustMarshal([]asn1.ObjectIdentifier{oidServerAuth, oidClientAuth})}),
		mustMarshal(pkix.Extension{Id: oidExtBasicConstraints, Critical: true, Value: mustMarshal(basicConstraints{IsCA: false, MaxPathLen: -1})}),
	}, nil)
)

// leafKeyUsage is the KeyUsage BIT STRING of digitalSignature (bit 0)
// and keyEncipherment (bit 2), in the fewest bits, as RFC 5280 wants.
func leafKeyUsage() asn1.BitString {
	return asn1.BitString{Bytes: []byte{0b1010_0000}, BitLength: 3}
}

// basicConstraints is the extension's value; a leaf's is an empty
// SEQUENCE (CA false and no path length are both defaults).
type basicConstraints struct {
	IsCA       bool `asn1:"optional"`
	MaxPathLen int  `asn1:"optional,default:-1"`
}

// authorityKeyID is the extension's value with a key identifier only.
type authorityKeyID struct {
	KeyID []byte `asn1:"optional,tag:0"`
}

func mustMarshal(v any) []byte {
	b, err := asn1.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("ca: encode %T: %v", v, err))
	}
	return b
}

// signatureParams picks the signature algorithm for a CA key as
// CreateCertificate does by default: ECDSA with the hash of the curve's
// size, RSA PKCS #1 v1.5 with SHA-256. It returns the AlgorithmIdentifier
// in DER and the hash to sign with.
func signatureParams(pub crypto.PublicKey) ([]byte, crypto.Hash, error) {
	switch p := pub.(type) {
	case *ecdsa.PublicKey:
		switch p.Curve {
		case elliptic.P256():
			return mustMarshal(pkix.AlgorithmIdentifier{Algorithm: oidECDSAWithSHA256}), crypto.SHA256, nil
		case elliptic.P384():
			return mustMarshal(pkix.AlgorithmIdentifier{Algorithm: oidECDSAWithSHA384}), crypto.SHA384, nil
		case elliptic.P521():
			return mustMarshal(pkix.AlgorithmIdentifier{Algorithm: oidECDSAWithSHA512}), crypto.SHA512, nil
		}
		return nil, 0, errors.New("signer: an ECDSA key on a curve the CA does not sign with")
	case *rsa.PublicKey:
		return mustMarshal(pkix.AlgorithmIdentifier{Algorithm: oidSHA256WithRSA, Parameters: asn1.NullRawValue}), crypto.SHA256, nil
	}
	return nil, 0, fmt.Errorf("signer: a %T key is neither ECDSA nor RSA", pub)
}

// LeafIssuer signs leaf certificates with one Signer. Build it once per
// signing key (NewLeafIssuer); it is safe for concurrent use.
type LeafIssuer struct {
	signer Signer
	// sigAlg is the signature's AlgorithmIdentifier (DER), written both
	// in the TBSCertificate and after it; hash is what the key signs.
	sigAlg []byte
	hash   crypto.Hash
	// fixedExts are the extensions every leaf of this signer has, in
	// order: derLeafExtensions, then the authority key id when the
	// signing certificate has a subject key id.
	fixedExts []byte
}

// NewLeafIssuer checks s (a CA certificate and its own key, of a type
// the CA signs with) and encodes what its leaves share. Whether s is
// valid at a given time is checked by each Issue.
func NewLeafIssuer(s Signer) (*LeafIssuer, error) {
	switch {
	case s.Cert == nil || s.Key == nil:
		return nil, errors.New("signer: no CA certificate or key")
	case !s.Cert.IsCA:
		return nil, fmt.Errorf("signer: %q is not a CA certificate", s.Cert.Subject.CommonName)
	case !samePublicKey(s.Key.Public(), s.Cert.PublicKey):
		return nil, errors.New("signer: the key is not the certificate's")
	case len(s.Cert.RawSubject) == 0:
		return nil, errors.New("signer: the CA certificate has no encoded subject")
	}
	sigAlg, hash, err := signatureParams(s.Key.Public())
	if err != nil {
		return nil, err
	}
	exts := derLeafExtensions
	if skid := s.Cert.SubjectKeyId; len(skid) > 0 {
		aki := mustMarshal(pkix.Extension{Id: oidExtAuthorityKeyID, Value: mustMarshal(authorityKeyID{KeyID: skid})})
		exts = append(append([]byte(nil), exts...), aki...)
	}
	return &LeafIssuer{signer: s, sigAlg: sigAlg, hash: hash, fixedExts: exts}, nil
}

// IssuedLeaf is a leaf certificate as Issue made it: its DER and the
// fields a caller reports without parsing it back.
type IssuedLeaf struct {
	DER    []byte
	Serial *big.Int
	// NotBefore and NotAfter are as the certificate states them: in
	// UTC, to the second.
	NotBefore, NotAfter time.Time
}

// PEM is the leaf as a PEM CERTIFICATE block, the bytes
// pem.EncodeToMemory writes (RFC 7468: base64 in lines of 64
// characters), in one allocation: pem's line breaker, which writes
// through two buffered writers, showed at ~2% of a server's CPU when
// signing.
func (l IssuedLeaf) PEM() []byte {
	return appendCertificatePEM(nil, l.DER)
}

const (
	pemCertBegin = "-----BEGIN " + pemCertificate + "-----\n"
	pemCertEnd   = "-----END " + pemCertificate + "-----\n"
	// pemLineBytes is what one line of 64 base64 characters encodes.
	pemLineBytes = 48
)

func appendCertificatePEM(b, der []byte) []byte {
	n := base64.StdEncoding.EncodedLen(len(der))
	lines := (len(der) + pemLineBytes - 1) / pemLineBytes
	b = slices.Grow(b, len(pemCertBegin)+n+lines+len(pemCertEnd))
	b = append(b, pemCertBegin...)
	for len(der) > 0 {
		line := der[:min(pemLineBytes, len(der))]
		b = append(base64.StdEncoding.AppendEncode(b, line), '\n')
		der = der[len(line):]
	}
	return append(b, pemCertEnd...)
}

// Issue makes and signs the leaf certificate of id for the key of csr,
// which CheckCSR has accepted: what SignLeaf describes, without checking
// the signature it has made (Check does).
func (li *LeafIssuer) Issue(csr *x509.CertificateRequest, id Identity, ttl time.Duration, now time.Time) (IssuedLeaf, error) {
	c := li.signer.Cert
	switch {
	case now.IsZero():
		return IssuedLeaf{}, errors.New("now: no time given")
	case now.Before(c.NotBefore):
		return IssuedLeaf{}, fmt.Errorf("signer: %q is not valid before %s", c.Subject.CommonName, c.NotBefore.UTC().Format(time.RFC3339))
	case !now.Before(c.NotAfter):
		return IssuedLeaf{}, fmt.Errorf("signer: %q expired at %s", c.Subject.CommonName, c.NotAfter.UTC().Format(time.RFC3339))
	case csr == nil || csr.PublicKey == nil:
		return IssuedLeaf{}, errors.New("csr: no certificate request")
	case id == nil:
		return IssuedLeaf{}, errors.New("identity: none given")
	case ttl <= 0:
		return IssuedLeaf{}, fmt.Errorf("ttl: %v is not a positive duration", ttl)
	}
	var commonName, dnsName string
	switch v := id.(type) {
	case ServiceID:
		commonName, dnsName = v.Service, v.DNSName()
	case AgentID:
		commonName = v.Instance
	default:
		return IssuedLeaf{}, fmt.Errorf("identity: a %T is neither a service nor an agent", id)
	}
	if commonName == "" {
		return IssuedLeaf{}, fmt.Errorf("identity: %s names no service or instance", id)
	}
	spki, err := leafSPKI(csr)
	if err != nil {
		return IssuedLeaf{}, err
	}
	serial, err := randomSerial()
	if err != nil {
		return IssuedLeaf{}, err
	}
	notBefore := secondsUTC(now.Add(-clockSkew))
	notAfter := secondsUTC(earliest(now.Add(ttl), c.NotAfter))

	tbs, err := li.tbs(serial, notBefore, notAfter, commonName, dnsName, id.String(), spki)
	if err != nil {
		return IssuedLeaf{}, err
	}
	sig, err := crypto.SignMessage(li.signer.Key, rand.Reader, tbs, li.hash)
	if err != nil {
		return IssuedLeaf{}, fmt.Errorf("sign the leaf: %w", err)
	}
	// Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm,
	// signatureValue BIT STRING } with no unused bits.
	certLen := len(tbs) + len(li.sigAlg) + tlvSize(1+len(sig))
	der := appendHeader(make([]byte, 0, tlvSize(certLen)), tagSequence, certLen)
	der = append(append(der, tbs...), li.sigAlg...)
	der = append(appendHeader(der, tagBitString, 1+len(sig)), 0)
	der = append(der, sig...)
	return IssuedLeaf{DER: der, Serial: serial, NotBefore: notBefore, NotAfter: notAfter}, nil
}

// leafSPKI is the SubjectPublicKeyInfo a leaf carries: the key as
// CreateCertificate writes it, not necessarily the CSR's bytes as they
// came, since crypto/x509 parses a CSR whose key's AlgorithmIdentifier
// carries trailing elements, and a leaf must not copy such an encoding.
// The CSR's bytes are used as they are when they are that encoding,
// which for an ECDSA key is known in advance (a fixed prefix, then the
// uncompressed point the parser read); anything else is encoded afresh.
func leafSPKI(csr *x509.CertificateRequest) ([]byte, error) {
	raw := csr.RawSubjectPublicKeyInfo
	if p, ok := csr.PublicKey.(*ecdsa.PublicKey); ok {
		var prefix []byte
		var pointLen int
		switch p.Curve {
		case elliptic.P256():
			prefix, pointLen = spkiPrefixP256, 65
		case elliptic.P384():
			prefix, pointLen = spkiPrefixP384, 97
		}
		if prefix != nil && len(raw) == len(prefix)+pointLen && bytes.HasPrefix(raw, prefix) {
			return raw, nil
		}
	}
	spki, err := x509.MarshalPKIXPublicKey(csr.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("csr: its public key: %w", err)
	}
	return spki, nil
}

// The DER of an ECDSA SubjectPublicKeyInfo on P-256 and P-384 up to the
// uncompressed point (RFC 5480): what MarshalPKIXPublicKey writes first.
var (
	spkiPrefixP256 = ecSPKIPrefix(asn1.ObjectIdentifier{1, 2, 840, 10045, 3, 1, 7}, 65)
	spkiPrefixP384 = ecSPKIPrefix(asn1.ObjectIdentifier{1, 3, 132, 0, 34}, 97)
)

// ecSPKIPrefix is SEQUENCE { AlgorithmIdentifier { id-ecPublicKey,
// curve }, BIT STRING } up to the point of pointLen octets.
func ecSPKIPrefix(curve asn1.ObjectIdentifier, pointLen int) []byte {
	alg := mustMarshal(pkix.AlgorithmIdentifier{
		Algorithm:  asn1.ObjectIdentifier{1, 2, 840, 10045, 2, 1},
		Parameters: asn1.RawValue{FullBytes: mustMarshal(curve)},
	})
	bitString := appendLength([]byte{tagBitString}, 1+pointLen)
	b := appendLength([]byte{tagSequence}, len(alg)+len(bitString)+1+pointLen)
	b = append(b, alg...)
	b = append(b, bitString...)
	return append(b, 0) // no unused bits
}

// tbs encodes the TBSCertificate (RFC 5280, 4.1) of one leaf. The
// primitive elements are written first, into one scratch buffer; the
// lengths of the constructed ones around them follow from theirs, so the
// TBSCertificate is written in one pass into a buffer of its exact size.
func (li *LeafIssuer) tbs(serial *big.Int, notBefore, notAfter time.Time, commonName, dnsName, uri string, spki []byte) ([]byte, error) {
	prim, err := appendPositiveInteger(make([]byte, 0, 64+len(commonName)+len(dnsName)+len(uri)), serial)
	if err != nil {
		return nil, err
	}
	serialEnd := len(prim)
	prim = appendTime(appendTime(prim, notBefore), notAfter)
	timesEnd := len(prim)
	if prim, err = appendDirectoryString(prim, commonName); err != nil {
		return nil, err
	}
	cnEnd := len(prim)
	// subjectAltName: the DNS name first, then the URI, as
	// CreateCertificate orders them.
	if dnsName != "" {
		if prim, err = appendIA5(prim, tagDNSName, dnsName); err != nil {
			return nil, err
		}
	}
	if prim, err = appendIA5(prim, tagURIName, uri); err != nil {
		return nil, err
	}
	serialDER, times, cn, names := prim[:serialEnd], prim[serialEnd:timesEnd], prim[timesEnd:cnEnd], prim[cnEnd:]

	// The contents' lengths of the constructed elements, inside out.
	// Name ::= SEQUENCE OF SET OF SEQUENCE { type, value }: the common
	// name alone, as pkix.Name{CommonName: ...} encodes.
	atvLen := len(derCommonName) + len(cn)
	rdnLen := tlvSize(atvLen)
	nameLen := tlvSize(rdnLen)
	// Extension { extnID, extnValue OCTET STRING { GeneralNames } }, not
	// critical: the subject is not empty.
	sanValueLen := tlvSize(len(names))
	sanLen := len(derSubjectAltName) + tlvSize(sanValueLen)
	extsLen := len(li.fixedExts) + tlvSize(sanLen)
	issuer := li.signer.Cert.RawSubject
	tbsLen := len(derVersion3) + len(serialDER) + len(li.sigAlg) + len(issuer) +
		tlvSize(len(times)) + tlvSize(nameLen) + len(spki) + tlvSize(tlvSize(extsLen))

	b := make([]byte, 0, tlvSize(tbsLen))
	b = appendHeader(b, tagSequence, tbsLen)
	b = append(b, derVersion3...)
	b = append(b, serialDER...)
	b = append(b, li.sigAlg...)
	b = append(b, issuer...)
	b = append(appendHeader(b, tagSequence, len(times)), times...)
	b = appendHeader(appendHeader(appendHeader(b, tagSequence, nameLen), tagSet, rdnLen), tagSequence, atvLen)
	b = append(append(b, derCommonName...), cn...)
	b = append(b, spki...)
	b = append(appendHeader(appendHeader(b, tagExplicit3, tlvSize(extsLen)), tagSequence, extsLen), li.fixedExts...)
	b = append(appendHeader(b, tagSequence, sanLen), derSubjectAltName...)
	b = append(appendHeader(appendHeader(b, tagOctetString, sanValueLen), tagSequence, len(names)), names...)
	if len(b) != tlvSize(tbsLen) {
		return nil, fmt.Errorf("encode the leaf: %d octets written, %d counted", len(b), tlvSize(tbsLen))
	}
	return b, nil
}

// Check reads leaf back as a peer would and checks it: it parses, its
// signature verifies with the signing certificate's key, and it states
// the serial and validity Issue reported. It returns the parsed leaf.
func (li *LeafIssuer) Check(leaf IssuedLeaf) (*x509.Certificate, error) {
	cert, err := x509.ParseCertificate(leaf.DER)
	if err != nil {
		return nil, fmt.Errorf("the leaf does not parse: %w", err)
	}
	if err := cert.CheckSignatureFrom(li.signer.Cert); err != nil {
		return nil, fmt.Errorf("the leaf's signature does not verify with %q: %w", li.signer.Cert.Subject.CommonName, err)
	}
	if leaf.Serial == nil || cert.SerialNumber.Cmp(leaf.Serial) != 0 ||
		!cert.NotBefore.Equal(leaf.NotBefore) || !cert.NotAfter.Equal(leaf.NotAfter) {
		return nil, errors.New("the leaf does not state the serial and validity it was issued with")
	}
	return cert, nil
}

// secondsUTC is t in UTC to the second, as a certificate states a time.
func secondsUTC(t time.Time) time.Time {
	return time.Unix(t.Unix(), 0).UTC()
}
