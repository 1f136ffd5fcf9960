// Package caapi holds the bodies of the Connect CA's HTTP routes, which
// the routes (internal/ca/camodule) answer and the CLI (internal/ca/command)
// reads: one definition of the wire shapes for both sides, in a package
// that neither side's other code depends on.
package caapi

import (
	"encoding/json"
	"time"
)

// RootsBody is the answer of GET /v1/ca/roots.
type RootsBody struct {
	TrustDomain string `json:"trust_domain"`
	// Datacenter is the datacenter of the server that answered: the one
	// its leaves are signed for, which a CSR's SPIFFE id must name.
	Datacenter   string     `json:"datacenter"`
	ActiveRootID string     `json:"active_root_id"`
	Roots        []RootBody `json:"roots"`
}

// RootBody is one root in RootsBody: never a key, the CARoot holds none.
type RootBody struct {
	ID                string     `json:"id"`
	Name              string     `json:"name"`
	RootCert          string     `json:"root_cert"`
	IntermediateCerts []string   `json:"intermediate_certs"`
	Active            bool       `json:"active"`
	RotatedOutAt      *time.Time `json:"rotated_out_at"`
	NotAfter          *time.Time `json:"not_after"`
}

// ConfigBody is the answer of GET /v1/ca/config: the stored settings
// (never a private key) and the manager's report.
type ConfigBody struct {
	Version string          `json:"version"`
	Config  json.RawMessage `json:"config"`
	Manager json.RawMessage `json:"manager,omitempty"`
}

// ConfigRequest is the body of PUT /v1/ca/config: the shape GET answers,
// so that an answer edited can be sent back. Config holds the settings to
// change (the others keep their values); Version, when given, makes the
// write a compare-and-swap on the version GET showed; Manager is the
// manager's report, read-only, and ignored.
type ConfigRequest struct {
	Version string          `json:"version,omitempty"`
	Config  json.RawMessage `json:"config"`
	Manager json.RawMessage `json:"manager,omitempty"`
}

// SignRequestBody is the body of POST /v1/ca/sign.
type SignRequestBody struct {
	// CSR is a PEM CERTIFICATE REQUEST.
	CSR string `json:"csr"`
}

// SignBody is the answer of POST /v1/ca/sign.
type SignBody struct {
	CertPEM  string    `json:"cert_pem"`
	ChainPEM string    `json:"chain_pem"`
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"not_after"`
}
