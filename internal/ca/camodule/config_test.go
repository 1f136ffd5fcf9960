package camodule_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/ca/camodule"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/server"
)

// put sends a PUT of body (marshalled to JSON unless a string) and returns
// the status and the whole answer.
func put(t *testing.T, url string, body any) (int, string) {
	t.Helper()
	b, ok := body.(string)
	if !ok {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		b = string(raw)
	}
	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(out)
}

// readyServer starts a server with the CA and waits for its first root.
func readyServer(t *testing.T) (*server.Server, string, camodule.RootsBody) {
	t.Helper()
	srv := start(t, nil)
	base := "http://" + srv.HTTPAddr()
	var roots camodule.RootsBody
	eventually(t, "an active root", func() bool {
		code, _ := get(t, base+"/v1/ca/roots", &roots)
		return code == http.StatusOK && roots.ActiveRootID != ""
	})
	return srv, base, roots
}

// suppliedPair is a root made outside the CA, as an operator supplies it.
func suppliedPair(t *testing.T, td string, kt ca.KeyType, now time.Time, ttl time.Duration) (certPEM, keyPEM string) {
	t.Helper()
	cert, key, err := ca.NewRoot(ca.RootOptions{TrustDomain: td, KeyType: kt, Now: now, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	k, err := ca.EncodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(ca.EncodeCerts(cert)), string(k)
}

// notACA is a self-signed certificate that is not a CA.
func notACA(t *testing.T) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ca.GenerateKey(ca.DefaultKeyType)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "not a CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ca.EncodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(ca.EncodeCerts(cert)), string(k)
}

// keyLines are the base64 lines of a PEM key: what a leak would show.
func keyLines(keyPEM string) []string {
	var out []string
	for _, l := range strings.Split(keyPEM, "\n") {
		if l != "" && !strings.HasPrefix(l, "-----") {
			out = append(out, l)
		}
	}
	return out
}

// assertNoKey fails when text shows any part of a private key.
func assertNoKey(t *testing.T, what, text string, keys ...string) {
	t.Helper()
	if strings.Contains(text, "PRIVATE KEY") {
		t.Errorf("%s shows a private key: %s", what, text)
	}
	for _, k := range keys {
		for _, l := range keyLines(k) {
			// JSON escapes nothing in base64 but "/" and "+" stay as they are.
			if strings.Contains(text, l) {
				t.Errorf("%s holds a line of a private key", what)
				return
			}
		}
	}
}

// configAnswer is the answer of GET and PUT /v1/ca/config.
type configAnswer struct {
	Version string         `json:"version"`
	Config  map[string]any `json:"config"`
	Manager map[string]any `json:"manager"`
}

// Every bad PUT of the configuration is refused with 400 naming its
// field; nothing is written, the active root stays, no key is quoted.
func TestPutConfigRefusals(t *testing.T) {
	srv, base, roots := readyServer(t)
	var before configAnswer
	if code, body := get(t, base+"/v1/ca/config", &before); code != http.StatusOK {
		t.Fatalf("GET config = %d %s", code, body)
	}
	now := time.Now()
	td := roots.TrustDomain
	certA, keyA := suppliedPair(t, td, ca.DefaultKeyType, now, 0)
	_, keyB := suppliedPair(t, td, ca.DefaultKeyType, now, 0)
	expired, expiredKey := suppliedPair(t, td, ca.DefaultKeyType, now.Add(-48*time.Hour), 24*time.Hour)
	shortLived, shortKey := suppliedPair(t, td, ca.DefaultKeyType, now, 2*time.Hour)
	leafCert, leafKey := notACA(t)
	cfg := func(fields map[string]any) map[string]any { return map[string]any{"config": fields} }
	cases := []struct {
		name  string
		body  any
		code  int
		field string // the field the refusal names first
		want  string // a part of the reason
	}{
		{"supplied key not its certificate's", cfg(map[string]any{"root_cert": certA, "private_key": keyB}), 400, "private_key", "not the key"},
		{"supplied certificate not a CA", cfg(map[string]any{"root_cert": leafCert, "private_key": leafKey}), 400, "root_cert", "not a CA"},
		{"supplied root expired", cfg(map[string]any{"root_cert": expired, "private_key": expiredKey}), 400, "root_cert", "expired"},
		{"leaf TTL under an hour", cfg(map[string]any{"leaf_ttl": "1800s"}), 400, "leaf_ttl", "minimum"},
		{"leaf TTL beyond the supplied root", cfg(map[string]any{"root_cert": shortLived, "private_key": shortKey, "leaf_ttl": "3h"}), 400, "leaf_ttl", "outlives"},
		{"leaf TTL beyond the root TTL", cfg(map[string]any{"leaf_ttl": "100000h"}), 400, "leaf_ttl", "root_ttl"},
		{"bad key type", cfg(map[string]any{"private_key_type": "dsa"}), 400, "private_key_type", "not a key type"},
		{"bad key size", cfg(map[string]any{"private_key_bits": 1024}), 400, "private_key_bits", "1024"},
		{"RSA of 1024 bits", cfg(map[string]any{"private_key_type": "rsa", "private_key_bits": 1024}), 400, "private_key_bits", "1024"},
		{"a private key without its root", cfg(map[string]any{"private_key": keyA}), 400, "root_cert", "required"},
		{"a root without its private key", cfg(map[string]any{"root_cert": certA}), 400, "private_key", "required"},
		{"a root that is not PEM", cfg(map[string]any{"root_cert": "hello", "private_key": keyA}), 400, "root_cert", "PEM"},
		{"a key that is not PEM", cfg(map[string]any{"root_cert": certA, "private_key": "hello"}), 400, "private_key", "PEM"},
		{"supplied key type contradicted", cfg(map[string]any{"root_cert": certA, "private_key": keyA, "private_key_type": "rsa"}), 400, "private_key_type", "supplied root"},
		{"an unknown provider", cfg(map[string]any{"provider": "vault"}), 400, "provider", "not a provider"},
		{"an unknown setting", cfg(map[string]any{"leaf_tll": "24h"}), 400, "config", "leaf_tll"},
		{"no settings", map[string]any{"version": before.Version}, 400, "config", "missing"},
		{"settings not an object", `{"config": [1]}`, 400, "config", "object"},
		{"not JSON", `{"config":`, 400, "", ""},
		{"a stale version", map[string]any{"version": "1", "config": map[string]any{"leaf_ttl": "24h"}}, 409, "version", "not 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := put(t, base+"/v1/ca/config", c.body)
			if code != c.code {
				t.Fatalf("PUT = %d %s, want %d", code, body, c.code)
			}
			var e struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("answer %q is not an error: %v", body, err)
			}
			if c.field != "" && !strings.HasPrefix(e.Error, c.field+":") {
				t.Errorf("error %q does not name %s first", e.Error, c.field)
			}
			if !strings.Contains(e.Error, c.want) {
				t.Errorf("error %q does not say %q", e.Error, c.want)
			}
			assertNoKey(t, "the refusal", body, keyA, keyB, expiredKey, shortKey, leafKey)
		})
	}
	var after configAnswer
	get(t, base+"/v1/ca/config", &after)
	if after.Version != before.Version {
		t.Errorf("the configuration was written: version %s, then %s", before.Version, after.Version)
	}
	var rootsAfter camodule.RootsBody
	get(t, base+"/v1/ca/roots", &rootsAfter)
	if rootsAfter.ActiveRootID != roots.ActiveRootID || len(rootsAfter.Roots) != 1 {
		t.Errorf("roots changed: %+v", rootsAfter)
	}
	if n := count(t, srv.API(), ca.SigningKeyType); n != 1 {
		t.Errorf("%d signing keys, want the one of the active root", n)
	}
}

// A PUT changes only the settings it names, answers as GET does, and
// a GET's answer sent back changes nothing.
func TestPutConfigMerges(t *testing.T) {
	_, base, _ := readyServer(t)
	code, body := put(t, base+"/v1/ca/config", map[string]any{"config": map[string]any{"leaf_ttl": "24h", "csr_max_per_second": 500}})
	if code != http.StatusOK {
		t.Fatalf("PUT = %d %s", code, body)
	}
	var got configAnswer
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if got.Config["leaf_ttl"] != "86400s" || got.Config["csr_max_per_second"] != float64(500) || got.Config["private_key_type"] != "ec" || got.Config["root_ttl"] != "315360000s" {
		t.Errorf("config after the PUT = %v", got.Config)
	}
	_, whole := get(t, base+"/v1/ca/config", nil)
	code, again := put(t, base+"/v1/ca/config", whole)
	if code != http.StatusOK {
		t.Fatalf("PUT of GET's answer = %d %s", code, again)
	}
	var back configAnswer
	if err := json.Unmarshal([]byte(again), &back); err != nil {
		t.Fatal(err)
	}
	if !sameJSON(t, got.Config, back.Config) {
		t.Errorf("GET's answer sent back changed the settings: %v, then %v", got.Config, back.Config)
	}
	// null takes the default again.
	code, body = put(t, base+"/v1/ca/config", `{"config": {"leaf_ttl": null}}`)
	if code != http.StatusOK || !strings.Contains(body, `"259200s"`) {
		t.Errorf("PUT leaf_ttl null = %d %s, want the default 72h", code, body)
	}
	// The version GET shows makes a compare-and-swap that holds.
	var cur configAnswer
	get(t, base+"/v1/ca/config", &cur)
	if code, body := put(t, base+"/v1/ca/config", map[string]any{"version": cur.Version, "config": map[string]any{"leaf_ttl": "48h"}}); code != http.StatusOK {
		t.Errorf("PUT at the current version = %d %s", code, body)
	}
	if code, _ := put(t, base+"/v1/ca/config", map[string]any{"version": cur.Version, "config": map[string]any{"leaf_ttl": "49h"}}); code != http.StatusConflict {
		t.Errorf("PUT at the version before = %d, want 409", code)
	}
}

func sameJSON(t *testing.T, a, b any) bool {
	t.Helper()
	x, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(x, y)
}

// signingKey reads a root's sealed key in process, as only the server's
// own code may.
func signingKey(t *testing.T, api resource.API, rootID string) *pbca.CASigningKey {
	t.Helper()
	resp, err := api.Read(resource.FromOperations(context.Background()), &pbresource.ReadRequest{Id: ca.SigningKeyID(ca.RootName(rootID))})
	if err != nil {
		t.Fatalf("read the signing key of %s: %v", rootID, err)
	}
	k, err := resource.DecodeData[*pbca.CASigningKey](resp.GetResource())
	if err != nil {
		t.Fatal(err)
	}
	return k
}
