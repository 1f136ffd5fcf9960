package main

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"trellis.dev/trellis/internal/ca"
)

// trellis ca leaf against a real dev server: it writes a new key (0600)
// and the leaf of the service's SPIFFE id followed by its chain, which
// verifies against the bundle of trellis ca roots --pem, with crypto/x509
// as a TLS peer does and with openssl verify; an agent's leaf too; and
// each mistake is refused before anything is written.
func TestCALeafCommand(t *testing.T) {
	addr := startDev(t, "-instances", "0")
	vars := map[string]string{"TRELLIS_ADDR": addr}
	waitFor(t, "the CA manager made its root", func() bool {
		_, out, _ := run(t, "", vars, "ca", "roots")
		return strings.Contains(out, " yes ")
	})
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "web.pem"), filepath.Join(dir, "web-key.pem")
	code, out, errOut := run(t, "", vars, "ca", "leaf", "web", "-namespace", "shop", "--cert-file", certFile, "--key-file", keyFile)
	if code != 0 {
		t.Fatalf("ca leaf: exit %d: %s%s", code, out, errOut)
	}
	id := regexp.MustCompile(`spiffe://[0-9a-f-]{36}\.trellis/ns/shop/dc/dc1/svc/web`).FindString(out)
	if id == "" || !strings.Contains(out, certFile) || !strings.Contains(out, keyFile) {
		t.Fatalf("ca leaf says:\n%s", out)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ca.ParseKey(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := ca.ParseCerts(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	leaf := certs[0]
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != id || !leaf.PublicKey.(*ecdsa.PublicKey).Equal(key.Public()) {
		t.Errorf("the leaf names %v for its key; want %s for the key written", leaf.URIs, id)
	}
	if strings.Contains(string(certPEM), "PRIVATE") {
		t.Error("the certificate file holds a key")
	}

	_, bundle, _ := run(t, "", vars, "ca", "roots", "--pem")
	rootsFile := filepath.Join(dir, "roots.pem")
	if err := os.WriteFile(rootsFile, []byte(bundle), 0o600); err != nil {
		t.Fatal(err)
	}
	pool, inter := x509.NewCertPool(), x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(bundle)) {
		t.Fatal("no root in the bundle")
	}
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the leaf does not verify against the roots: %v", err)
	}
	if bin, err := exec.LookPath("openssl"); err == nil {
		// The command its --help and docs/ca.md show.
		out, err := exec.Command(bin, "verify", "-CAfile", rootsFile, "-untrusted", certFile, certFile).CombinedOutput()
		if err != nil || !strings.Contains(string(out), ": OK") {
			t.Errorf("openssl verify: %v\n%s", err, out)
		}
	}

	// An agent's leaf, as JSON.
	agentCert, agentKey := filepath.Join(dir, "a.pem"), filepath.Join(dir, "a-key.pem")
	code, out, errOut = run(t, "", vars, "ca", "leaf", "--agent", "i-1", "--cert-file", agentCert, "--key-file", agentKey, "-o", "json")
	if code != 0 {
		t.Fatalf("ca leaf --agent: exit %d: %s%s", code, out, errOut)
	}
	var res struct {
		SPIFFEID string    `json:"spiffe_id"`
		Serial   string    `json:"serial"`
		NotAfter time.Time `json:"not_after"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.HasSuffix(res.SPIFFEID, "/agent/client/dc/dc1/id/i-1") || res.Serial == "" || time.Until(res.NotAfter) < 71*time.Hour {
		t.Errorf("ca leaf --agent -o json = %+v", res)
	}

	expect := expecter(t, addr)
	expect(2, "", "SERVICE: required (or --agent INSTANCE", "ca", "leaf")
	expect(2, "", "--agent: give either SERVICE or --agent INSTANCE, not both", "ca", "leaf", "web", "--agent", "i-1")
	expect(2, "", `SERVICE: "Web_1" is not a lower-case DNS label`, "ca", "leaf", "Web_1", "--cert-file", filepath.Join(dir, "x.pem"))
	expect(2, "", `--namespace: "Shop" is not`, "ca", "leaf", "web", "-n", "Shop", "--cert-file", filepath.Join(dir, "x.pem"))
	expect(2, "", "--namespace: an agent's id has no namespace", "ca", "leaf", "--agent", "i-1", "-n", "shop")
	expect(2, "", "--key-file: ", "ca", "leaf", "web", "--cert-file", certFile, "--key-file", certFile)
	if _, err := os.Stat(filepath.Join(dir, "x.pem")); !os.IsNotExist(err) {
		t.Errorf("a refused command wrote a file: %v", err)
	}
}
