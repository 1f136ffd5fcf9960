package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// Key algorithms a CA or a leaf key may use.
const (
	AlgorithmEC  = "ec"
	AlgorithmRSA = "rsa"
)

// KeyType is a key algorithm and size: "ec" 256 (P-256) or 384 (P-384),
// or "rsa" 2048 or 4096.
type KeyType struct {
	Algorithm string // AlgorithmEC or AlgorithmRSA
	Bits      int
}

// DefaultKeyType is ECDSA P-256: the fastest to sign with and the one
// every TLS stack speaks.
var DefaultKeyType = KeyType{Algorithm: AlgorithmEC, Bits: 256}

func (k KeyType) String() string { return fmt.Sprintf("%s-%d", k.Algorithm, k.Bits) }

// Validate refuses a key type the CA does not generate: it names the
// algorithm or the size at fault.
func (k KeyType) Validate() error {
	switch k.Algorithm {
	case AlgorithmEC:
		if k.Bits != 256 && k.Bits != 384 {
			return fmt.Errorf("key bits: an ec key has 256 or 384 bits, not %d", k.Bits)
		}
	case AlgorithmRSA:
		if k.Bits != 2048 && k.Bits != 4096 {
			return fmt.Errorf("key bits: an rsa key has 2048 or 4096 bits, not %d", k.Bits)
		}
	default:
		return fmt.Errorf("key type: %q is neither %q nor %q", k.Algorithm, AlgorithmEC, AlgorithmRSA)
	}
	return nil
}

// GenerateKey makes a new private key of type k.
func GenerateKey(k KeyType) (crypto.Signer, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	if k.Algorithm == AlgorithmRSA {
		return rsa.GenerateKey(rand.Reader, k.Bits)
	}
	curve := elliptic.P256()
	if k.Bits == 384 {
		curve = elliptic.P384()
	}
	return ecdsa.GenerateKey(curve, rand.Reader)
}

// KeyTypeOf says what type of key pub is. It does not judge the size (an
// RSA key of 1024 bits is {"rsa", 1024}): callers decide what they accept.
func KeyTypeOf(pub crypto.PublicKey) (KeyType, error) {
	switch p := pub.(type) {
	case *ecdsa.PublicKey:
		if p.Curve == nil {
			return KeyType{}, errors.New("an ECDSA key without a curve")
		}
		return KeyType{Algorithm: AlgorithmEC, Bits: p.Curve.Params().BitSize}, nil
	case *rsa.PublicKey:
		if p.N == nil {
			return KeyType{}, errors.New("an RSA key without a modulus")
		}
		return KeyType{Algorithm: AlgorithmRSA, Bits: p.N.BitLen()}, nil
	}
	return KeyType{}, fmt.Errorf("a %T key is neither ECDSA nor RSA", pub)
}

// KeyID is the SHA-256 of pub's SubjectPublicKeyInfo in lower-case hex
// pairs joined by ':' (ab:cd:...). It names a CA root and, as bytes, is
// the SubjectKeyId of the CA certificates made here.
func KeyID(pub crypto.PublicKey) (string, error) {
	sum, err := keyIDBytes(pub)
	if err != nil {
		return "", err
	}
	return formatKeyID(sum), nil
}

func keyIDBytes(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	sum := sha256.Sum256(der)
	return sum[:], nil
}

func formatKeyID(b []byte) string {
	parts := make([]string, len(b))
	for i := range b {
		parts[i] = hex.EncodeToString(b[i : i+1])
	}
	return strings.Join(parts, ":")
}

// PEM block types written and read here.
const (
	pemCertificate        = "CERTIFICATE"
	pemPrivateKey         = "PRIVATE KEY"
	pemECPrivateKey       = "EC PRIVATE KEY"
	pemRSAPrivateKey      = "RSA PRIVATE KEY"
	pemCertificateRequest = "CERTIFICATE REQUEST"
	pemNewCertRequest     = "NEW CERTIFICATE REQUEST"
)

// EncodeKey writes a private key as a PKCS #8 PEM block.
func EncodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: der}), nil
}

// ParseKey reads the first private key block of PEM data: PKCS #8, SEC 1
// ("EC PRIVATE KEY") or PKCS #1 ("RSA PRIVATE KEY"). Its errors never
// quote the key's bytes.
func ParseKey(data []byte) (crypto.Signer, error) {
	sawPEM := false
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			if sawPEM {
				return nil, errors.New("no PEM private key block in it")
			}
			return nil, errors.New("it is not PEM")
		}
		sawPEM = true
		k, isKey, err := decodeKeyBlock(block)
		if !isKey {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("the %s block does not parse", block.Type)
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("a %T cannot sign", k)
		}
		if _, err := KeyTypeOf(s.Public()); err != nil {
			return nil, err
		}
		return s, nil
	}
}

// decodeKeyBlock decodes a PEM private key block of the encodings the CA
// reads: PKCS #8, SEC 1 ("EC PRIVATE KEY") or PKCS #1 ("RSA PRIVATE
// KEY"). isKey is false for a block of another type. The parsers' errors
// name the encoding's fault, never the bytes.
func decodeKeyBlock(block *pem.Block) (key any, isKey bool, err error) {
	switch block.Type {
	case pemPrivateKey:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case pemECPrivateKey:
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case pemRSAPrivateKey:
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, false, nil
	}
	return key, true, err
}

// EncodeCerts writes certificates as PEM blocks, in order: a leaf followed
// by its chain is what a TLS peer sends.
func EncodeCerts(certs ...*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: c.Raw})...)
	}
	return out
}

// ParseCerts reads every CERTIFICATE block of PEM data, in order, and
// refuses data with none.
func ParseCerts(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	sawPEM := false
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		sawPEM = true
		if block.Type != pemCertificate {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if !sawPEM {
		return nil, errors.New("it is not PEM")
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM CERTIFICATE block in it")
	}
	return certs, nil
}

// samePublicKey reports whether a and b are one key. Every key type the
// standard library makes has an Equal method; anything else is not ours.
func samePublicKey(a, b crypto.PublicKey) bool {
	k, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(b)
}
