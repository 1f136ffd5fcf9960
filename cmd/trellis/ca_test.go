package main

import (
	"crypto/x509"
	"encoding/pem"
	"regexp"
	"strings"
	"testing"
)

// trellis ca roots against a real dev server: the trust domain and one
// active root, the same as JSON, and a PEM bundle that parses as that
// root's CA certificate and holds no key.
func TestCARootsCommand(t *testing.T) {
	addr := startDev(t, "-instances", "0")
	vars := map[string]string{"TRELLIS_ADDR": addr}
	var out string
	waitFor(t, "the CA manager made its root", func() bool {
		_, out, _ = run(t, "", vars, "ca", "roots")
		return strings.Contains(out, " yes ")
	})
	td := regexp.MustCompile(`(?m)^Trust domain: ([0-9a-f-]{36}\.trellis)$`).FindStringSubmatch(out)
	if td == nil {
		t.Fatalf("ca roots names no trust domain:\n%s", out)
	}
	if n := strings.Count(out, " yes "); n != 1 {
		t.Errorf("ca roots shows %d active roots, want 1:\n%s", n, out)
	}
	expect := expecter(t, addr)
	expect(0, "", `"trust_domain": "`+td[1]+`"`, "ca", "roots", "-o", "json")

	code, bundle, errOut := run(t, "", vars, "ca", "roots", "--pem")
	if code != 0 {
		t.Fatalf("ca roots --pem: exit %d: %s", code, errOut)
	}
	if strings.Contains(bundle, "PRIVATE KEY") {
		t.Fatal("the bundle holds a private key")
	}
	block, rest := pem.Decode([]byte(bundle))
	if block == nil || block.Type != "CERTIFICATE" || strings.TrimSpace(string(rest)) != "" {
		t.Fatalf("ca roots --pem is not one certificate:\n%s", bundle)
	}
	root, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !root.IsCA || len(root.URIs) != 1 || root.URIs[0].String() != "spiffe://"+td[1] {
		t.Errorf("the root is CA %t with URIs %v, want a CA of spiffe://%s", root.IsCA, root.URIs, td[1])
	}
	expect(1, "", "", "ca", "roots", "--pem", "-o", "json")
}
