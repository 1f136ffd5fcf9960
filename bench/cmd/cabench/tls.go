package main

import (
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"trellis.dev/trellis/internal/tlsutil"
)

// makeTLS makes the cluster's TLS files as docs/cluster.md says (`trellis
// tls ca create`, `trellis tls cert create -server`), and returns the
// flags that give them to every server and the tls.Config a client of
// the public port uses: the cluster CA, and the server name of the
// datacenter's servers.
func (b *bench) makeTLS() ([]string, *tls.Config, error) {
	pki := filepath.Join(b.dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return nil, nil, err
	}
	for _, args := range [][]string{{"tls", "ca", "create"}, {"tls", "cert", "create", "-server"}} {
		cmd := exec.Command(b.trellis, args...)
		cmd.Dir = pki
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, nil, fmt.Errorf("trellis %v: %v\n%s", args, err, out)
		}
	}
	caFile := filepath.Join(pki, "trellis-agent-ca.pem")
	flags := []string{
		"-tls-ca-file", caFile,
		"-tls-cert-file", filepath.Join(pki, "dc1-server-trellis-0.pem"),
		"-tls-key-file", filepath.Join(pki, "dc1-server-trellis-0-key.pem"),
	}
	tc, err := tlsutil.New(tlsutil.Config{CAFile: caFile})
	if err != nil {
		return nil, nil, err
	}
	return flags, tc.OutgoingClientConfig(), nil
}
