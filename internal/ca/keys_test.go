package ca

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"regexp"
	"strings"
	"testing"
)

func TestKeyTypeValidate(t *testing.T) {
	cases := []struct {
		kt   KeyType
		says string // "" when valid
	}{
		{KeyType{"ec", 256}, ""},
		{KeyType{"ec", 384}, ""},
		{KeyType{"rsa", 2048}, ""},
		{KeyType{"rsa", 4096}, ""},
		{KeyType{"ec", 521}, "key bits"},
		{KeyType{"ec", 2048}, "key bits"},
		{KeyType{"rsa", 1024}, "key bits"},
		{KeyType{"rsa", 3072}, "key bits"},
		{KeyType{"rsa", 0}, "key bits"},
		{KeyType{"ed25519", 256}, "key type"},
		{KeyType{"EC", 256}, "key type"},
		{KeyType{}, "key type"},
	}
	for _, c := range cases {
		t.Run(c.kt.String(), func(t *testing.T) {
			err := c.kt.Validate()
			if c.says == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("Validate = %v, want an error naming %q", err, c.says)
			}
			if _, err := GenerateKey(c.kt); err == nil {
				t.Fatal("GenerateKey made a key of a type Validate refuses")
			}
		})
	}
}

func TestGenerateKeyAndKeyTypeOf(t *testing.T) {
	for _, kt := range []KeyType{{"ec", 256}, {"ec", 384}, {"rsa", 2048}} {
		t.Run(kt.String(), func(t *testing.T) {
			key := testKey(t, kt)
			got, err := KeyTypeOf(key.Public())
			if err != nil || got != kt {
				t.Fatalf("KeyTypeOf = %v, %v; want %v", got, err, kt)
			}
			// PEM round trip keeps the key.
			pemKey, err := EncodeKey(key)
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParseKey(pemKey)
			if err != nil {
				t.Fatal(err)
			}
			if !samePublicKey(back.Public(), key.Public()) {
				t.Fatal("ParseKey(EncodeKey(k)) is another key")
			}
		})
	}
	_, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := KeyTypeOf(edPriv.Public()); err == nil {
		t.Fatal("KeyTypeOf accepted an ed25519 key")
	}
	if _, err := KeyTypeOf(&ecdsa.PublicKey{}); err == nil {
		t.Fatal("KeyTypeOf accepted an ECDSA key without a curve")
	}
	if _, err := KeyTypeOf(&rsa.PublicKey{}); err == nil {
		t.Fatal("KeyTypeOf accepted an RSA key without a modulus")
	}
}

func TestParseKeyForms(t *testing.T) {
	ec := testKey(t, KeyType{"ec", 256}).(*ecdsa.PrivateKey)
	sec1, _ := x509.MarshalECPrivateKey(ec)
	rsaKey := testKey(t, KeyType{"rsa", 2048}).(*rsa.PrivateKey)
	_, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	edDER, _ := x509.MarshalPKCS8PrivateKey(edPriv)

	good := map[string][]byte{
		"SEC 1":  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1}),
		"PKCS 1": pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)}),
		// A certificate before the key, as in a combined file.
		"after a certificate": append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})...),
	}
	for name, data := range good {
		if _, err := ParseKey(data); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := map[string]struct {
		data []byte
		says string
	}{
		"not PEM":       {[]byte("hello"), "not PEM"},
		"no key block":  {pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}}), "no PEM private key"},
		"garbage block": {pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("secret-bytes")}), "does not parse"},
		"ed25519":       {pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: edDER}), "neither ECDSA nor RSA"},
	}
	for name, c := range bad {
		_, err := ParseKey(c.data)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: ParseKey = %v, want an error saying %q", name, err, c.says)
		}
		if err != nil && strings.Contains(err.Error(), "secret-bytes") {
			t.Errorf("%s: the error quotes the key: %v", name, err)
		}
	}
}

func TestKeyID(t *testing.T) {
	key := testKey(t, DefaultKeyType)
	id, err := KeyID(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{2}(:[0-9a-f]{2}){31}$`).MatchString(id) {
		t.Fatalf("KeyID = %q, not 32 lower-case hex pairs joined by ':'", id)
	}
	again, _ := KeyID(key.Public())
	other, _ := KeyID(freshKey(t, DefaultKeyType).Public())
	if again != id || other == id {
		t.Fatalf("KeyID is not a function of the key: %q %q %q", id, again, other)
	}
	if _, err := KeyID(struct{}{}); err == nil {
		t.Fatal("KeyID accepted a value that is not a key")
	}
}
