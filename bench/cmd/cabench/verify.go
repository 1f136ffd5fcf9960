package main

import (
	"crypto/x509"
	"fmt"
	"time"

	"trellis.dev/trellis/bench/internal/caroots"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/ca/camodule"
	"trellis.dev/trellis/internal/testcluster"
)

// probeID is the service id of the throwaway CSRs that check that a
// server signs, before the run.
func probeID(roots *camodule.RootsBody) ca.ServiceID {
	return ca.ServiceID{TrustDomain: roots.TrustDomain, Namespace: "bench", Datacenter: roots.Datacenter, Service: "probe"}
}

// verifySamples verifies the kept leaves (verifyLeaves) against the
// roots the servers publish now.
func verifySamples(members []*testcluster.Member, samples []sample) (int, error) {
	body, err := caroots.Agreed(members)
	if err != nil {
		return 0, err
	}
	var roots []*x509.Certificate
	for _, r := range body.Roots {
		certs, err := ca.ParseCerts([]byte(r.RootCert))
		if err != nil {
			return 0, fmt.Errorf("root %s: %w", r.ID, err)
		}
		roots = append(roots, certs...)
	}
	return verifyLeaves(roots, samples, time.Now())
}

// verifyLeaves verifies each kept leaf, with the chain its answer
// carries, as a TLS peer would against roots at now, for server and
// client authentication; and checks that it names the SPIFFE id its CSR
// asked for, holds the CSR's public key and carries the serial the
// answer gives. It returns how many passed, and the first failure.
func verifyLeaves(roots []*x509.Certificate, samples []sample, now time.Time) (int, error) {
	if len(samples) == 0 {
		return 0, fmt.Errorf("no leaf was kept to verify")
	}
	for i, s := range samples {
		certs, err := ca.ParseCerts([]byte(s.resp.GetCertPem() + s.resp.GetChainPem()))
		if err != nil {
			return i, fmt.Errorf("leaf %d (%s): %w", i, s.req.id, err)
		}
		id, err := ca.VerifyPeer(certs, roots, now)
		if err != nil {
			return i, fmt.Errorf("leaf %d (%s): %w", i, s.req.id, err)
		}
		if id != ca.Identity(s.req.id) {
			return i, fmt.Errorf("leaf %d: names %s, its CSR asked for %s", i, id, s.req.id)
		}
		if !s.req.pub.Equal(certs[0].PublicKey) {
			return i, fmt.Errorf("leaf %d (%s): its public key is not its CSR's", i, s.req.id)
		}
		if got := certs[0].SerialNumber.Text(16); got != s.resp.GetSerial() {
			return i, fmt.Errorf("leaf %d (%s): serial %s, the answer says %s", i, s.req.id, got, s.resp.GetSerial())
		}
	}
	return len(samples), nil
}
