package main

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
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
	js := expect(0, "", `"trust_domain": "`+td[1]+`"`, "ca", "roots", "-o", "json")
	// The table shows the key id short, JSON whole (issue 25).
	short := regexp.MustCompile(`(?m)\s([0-9a-f]{2}(?::[0-9a-f]{2}){3}):…:((?:[0-9a-f]{2}:){2}[0-9a-f]{2})$`).FindStringSubmatch(out)
	if short == nil {
		t.Fatalf("ca roots shows no short key id:\n%s", out)
	}
	if !regexp.MustCompile(`"id": "` + short[1] + `(:[0-9a-f]{2}){25}:` + short[2] + `"`).MatchString(js) {
		t.Errorf("ca roots -o json lacks the full key id %s…%s:\n%s", short[1], short[2], js)
	}

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
	expect(2, "", "", "ca", "roots", "--pem", "-o", "json") // a usage mistake
}

// trellis ca config get|set and trellis ca rotate against a real dev
// server: get prints a file that set takes back, set changes only what
// the file names and refuses a stale version and bad settings by name,
// and rotate makes a second root, active, with the first rotated out.
func TestCAConfigAndRotateCommands(t *testing.T) {
	addr := startDev(t, "-instances", "0")
	vars := map[string]string{"TRELLIS_ADDR": addr}
	expect := expecter(t, addr)
	waitFor(t, "the CA manager made its root", func() bool {
		_, out, _ := run(t, "", vars, "ca", "roots")
		return strings.Contains(out, " yes ")
	})
	var settings string
	waitFor(t, "the CA manager reports ready", func() bool {
		_, settings, _ = run(t, "", vars, "ca", "config", "get")
		return strings.Contains(settings, "# CA manager: ready")
	})
	for _, want := range []string{"private_key_type: ec\n", "private_key_bits: 256\n", "leaf_ttl: 72h\n", "root_ttl: 87600h\n", "rotation: 0\n", `version: "`} {
		if !strings.Contains(settings, want) {
			t.Errorf("ca config get lacks %q:\n%s", want, settings)
		}
	}
	file := filepath.Join(t.TempDir(), "ca.yaml")
	if err := os.WriteFile(file, []byte(strings.Replace(settings, "leaf_ttl: 72h", "leaf_ttl: 24h", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	expect(0, "", "configuration set", "ca", "config", "set", "-f", file)
	expect(0, "", "leaf_ttl: 24h\n", "ca", "config", "get")
	expect(1, "", "version", "ca", "config", "set", "-f", file) // read at the version before
	expect(1, "leaf_ttl: 30m\n", "leaf_ttl: 30m0s is under the minimum", "ca", "config", "set", "-f", "-")
	expect(1, "leaf_tll: 24h\n", "leaf_tll", "ca", "config", "set", "-f", "-")
	expect(1, "private_key_bits: 1024\n", "private_key_bits", "ca", "config", "set", "-f", "-")
	expect(0, "csr_max_per_second: 250\n", "configuration set", "ca", "config", "set", "-f", "-")
	out := expect(0, "", `"config"`, "ca", "config", "get", "-o", "json")
	if !strings.Contains(out, `"csr_max_per_second": 250`) || !strings.Contains(out, `"leaf_ttl": "86400s"`) || strings.Contains(out, "PRIVATE") {
		t.Errorf("ca config get -o json after two sets:\n%s", out)
	}

	out = expect(0, "", "rotated the CA root", "ca", "rotate")
	ids := regexp.MustCompile(`(?m)^(old|new) root: ([0-9a-f:]{11}:…:[0-9a-f:]{8}) `).FindAllStringSubmatch(out, -1)
	if len(ids) != 2 || ids[0][2] == ids[1][2] {
		t.Fatalf("ca rotate names no old and new root:\n%s", out)
	}
	roots := expect(0, "", ids[1][2], "ca", "roots")
	if strings.Count(roots, " yes ") != 1 || strings.Count(roots, " no ") != 1 {
		t.Errorf("ca roots after a rotation, want one active and one not:\n%s", roots)
	}
	// The generic delete refuses both roots (issue 23): the active one is
	// rotated, never deleted; the one rotated out is the CA manager's to
	// prune. It refuses the configuration too; nothing changes.
	names := regexp.MustCompile(`(?m)^([0-9a-f]{32})\s+(yes|no)\s`).FindAllStringSubmatch(roots, -1)
	if len(names) != 2 {
		t.Fatalf("ca roots names %d roots, want 2:\n%s", len(names), roots)
	}
	for _, m := range names {
		want := "the CA manager alone deletes a root rotated out"
		if m[2] == "yes" {
			want = "is the CA's active root"
		}
		expect(1, "", want, "resource", "delete", "ca/v1/CARoot", m[1])
	}
	expect(1, "", "trellis ca config set", "resource", "delete", "ca/v1/CAConfig", "default")
	if again := expect(0, "", names[0][1], "ca", "roots"); again != roots {
		t.Errorf("ca roots changed after the refused deletes:\n%s\nthen:\n%s", roots, again)
	}
	bundle := expect(0, "", "CERTIFICATE", "ca", "roots", "--pem")
	if n := strings.Count(bundle, "BEGIN CERTIFICATE"); n != 3 {
		t.Errorf("the bundle holds %d certificates, want two roots and the cross-signed one", n)
	}
	expect(0, "", "rotation: 1\n", "ca", "config", "get")
}
