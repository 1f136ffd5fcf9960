package command

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/ca/caapi"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/resource"
)

// LeafResult is what trellis ca leaf prints with -o json.
type LeafResult struct {
	SPIFFEID string    `json:"spiffe_id"`
	CertFile string    `json:"cert_file"`
	KeyFile  string    `json:"key_file"`
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"not_after"`
}

func newLeafCmd(e *cli.Env) *cobra.Command {
	var certFile, keyFile, agent string
	return e.Command(cli.ClientCommand{
		Use:   "leaf (SERVICE | --agent INSTANCE)",
		Short: "Get a leaf certificate of the Connect CA for a service (or an agent): a new key, signed by the servers",
		Long: `Make a new ECDSA P-256 key on this machine, ask the servers to sign a leaf
certificate for the service's SPIFFE id with it, and write both: the key to
--key-file (mode 0600; it never leaves this machine) and the certificate to
--cert-file, the leaf followed by its chain, as a TLS peer sends them.

The id is spiffe://<trust-domain>/ns/<namespace>/dc/<datacenter>/svc/<SERVICE>,
with the trust domain and datacenter of the cluster the server answers for;
--agent INSTANCE asks for an agent's id instead,
spiffe://<trust-domain>/agent/client/dc/<datacenter>/id/<INSTANCE>. A service's
leaf also names <SERVICE>.svc.<namespace>.<datacenter>.trellis as its DNS name.
It lives the CA's leaf_ttl (72h by default); run the command again for a new one.

The files default to SERVICE.pem and SERVICE-key.pem (agent-INSTANCE.pem and
agent-INSTANCE-key.pem), and are replaced when they exist. Verify the leaf
against the roots with openssl (see docs/ca.md). The servers need
operator:write for this route (agents sign over gRPC).`,
		Example: `  trellis ca leaf web
  trellis ca leaf api -n payments --cert-file api.pem --key-file api-key.pem
  trellis ca leaf --agent i-0abc --cert-file agent.pem --key-file agent-key.pem

  # check it as a peer would
  trellis ca roots --pem > roots.pem
  openssl verify -CAfile roots.pem -untrusted web.pem web.pem`,
		Args:          cobra.MaximumNArgs(1),
		Namespaced:    true,
		NamespaceHelp: `the service's namespace (default "default")`,
		Output:        true,
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&certFile, "cert-file", "", "where to write the leaf and its chain (PEM; default SERVICE.pem)")
			fs.StringVar(&keyFile, "key-file", "", "where to write the new private key (PEM, mode 0600; default SERVICE-key.pem)")
			fs.StringVar(&agent, "agent", "", "sign an agent's id for this instance instead of a service's")
		},
		Check: func(call *cli.Call) error {
			name, err := leafSubject(call.Args, agent, call.Namespace)
			if err != nil {
				return cli.Usage(err)
			}
			if certFile == "" {
				certFile = name + ".pem"
			}
			if keyFile == "" {
				keyFile = name + "-key.pem"
			}
			if filepath.Clean(certFile) == filepath.Clean(keyFile) {
				return cli.Usage(fmt.Errorf("--key-file: %q is also --cert-file; the key needs a file of its own", keyFile))
			}
			return nil
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			var roots caapi.RootsBody
			if err := call.Client.Do(ctx, http.MethodGet, call.Client.URL("/v1/ca/roots", nil), nil, &roots); err != nil {
				return cli.Result{}, err
			}
			if roots.TrustDomain == "" || roots.Datacenter == "" {
				return cli.Result{}, errors.New("the server names no trust domain or datacenter yet: is its CA running? (trellis ca roots)")
			}
			id := leafID(roots, call.Args, agent, call.Namespace)
			key, err := ca.GenerateKey(ca.KeyType{Algorithm: ca.AlgorithmEC, Bits: 256})
			if err != nil {
				return cli.Result{}, err
			}
			csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
				Subject: pkix.Name{CommonName: leafCommonName(id)}, URIs: []*url.URL{id.URI()},
			}, key)
			if err != nil {
				return cli.Result{}, fmt.Errorf("make the CSR: %w", err)
			}
			var signed caapi.SignBody
			req := caapi.SignRequestBody{CSR: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr}))}
			if err := call.Client.Do(ctx, http.MethodPost, call.Client.URL("/v1/ca/sign", nil), req, &signed); err != nil {
				return cli.Result{}, err
			}
			keyPEM, err := ca.EncodeKey(key)
			if err != nil {
				return cli.Result{}, err
			}
			// The key first: a certificate file is useless without it.
			if err := replaceFile(keyFile, keyPEM, 0o600); err != nil {
				return cli.Result{}, fmt.Errorf("--key-file: %w", err)
			}
			if err := replaceFile(certFile, []byte(certChain(signed)), 0o644); err != nil {
				return cli.Result{}, fmt.Errorf("--cert-file: %w", err)
			}
			out := LeafResult{SPIFFEID: id.String(), CertFile: certFile, KeyFile: keyFile, Serial: signed.Serial, NotAfter: signed.NotAfter}
			return cli.Result{Value: out, Table: func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "Wrote the leaf of %s\n  certificate and chain: %s\n  key: %s\n  serial %s, expires %s (in %s)\n",
					out.SPIFFEID, certFile, keyFile, out.Serial, out.NotAfter.UTC().Format(time.RFC3339), cli.FormatAge(time.Until(out.NotAfter)))
				return err
			}}, nil
		},
	})
}

// leafSubject checks the arguments before any request and returns the
// name the files are named after.
func leafSubject(args []string, agent, namespace string) (string, error) {
	switch {
	case agent != "" && len(args) > 0:
		return "", errors.New("--agent: give either SERVICE or --agent INSTANCE, not both")
	case agent == "" && len(args) == 0:
		return "", errors.New("SERVICE: required (or --agent INSTANCE for an agent's leaf)")
	case agent != "":
		if namespace != "" {
			return "", errors.New("--namespace: an agent's id has no namespace")
		}
		if !resource.IsDNSLabel(agent) {
			return "", fmt.Errorf("--agent: %q is not a lower-case DNS label (a-z, 0-9, inner '-')", agent)
		}
		return "agent-" + agent, nil
	}
	if !resource.IsDNSLabel(args[0]) {
		return "", fmt.Errorf("SERVICE: %q is not a lower-case DNS label (a-z, 0-9, inner '-')", args[0])
	}
	if namespace != "" && !resource.IsDNSLabel(namespace) {
		return "", fmt.Errorf("--namespace: %q is not a lower-case DNS label (a-z, 0-9, inner '-')", namespace)
	}
	return args[0], nil
}

// leafID is the SPIFFE id asked for, in the trust domain and datacenter
// the server answered with.
func leafID(roots caapi.RootsBody, args []string, agent, namespace string) ca.Identity {
	if agent != "" {
		return ca.AgentID{TrustDomain: roots.TrustDomain, Datacenter: roots.Datacenter, Instance: agent}
	}
	if namespace == "" {
		namespace = "default"
	}
	return ca.ServiceID{TrustDomain: roots.TrustDomain, Namespace: namespace, Datacenter: roots.Datacenter, Service: args[0]}
}

func leafCommonName(id ca.Identity) string {
	if s, ok := id.(ca.ServiceID); ok {
		return s.Service
	}
	return id.(ca.AgentID).Instance
}

// certChain is the leaf followed by its chain, one PEM block after the
// other.
func certChain(s caapi.SignBody) string {
	out := strings.TrimRight(s.CertPEM, "\n") + "\n"
	if c := strings.TrimSpace(s.ChainPEM); c != "" {
		out += c + "\n"
	}
	return out
}

// replaceFile writes data to name with mode through a file beside it
// that is renamed over it, so that a reader never sees half a file and
// the key is never, even for a moment, readable by others.
func replaceFile(name string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, there is nothing to remove
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), name)
}
