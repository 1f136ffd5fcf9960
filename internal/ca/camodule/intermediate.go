package camodule

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"trellis.dev/trellis/internal/ca"
)

// The primary's side of secondary datacenters: it signs their
// intermediates, with the active root's own key, on any of its servers.

// Intermediate is an intermediate CA the primary signed for a secondary
// datacenter.
type Intermediate struct {
	CertPEM string
	// ChainPEM is what comes between the intermediate and the primary's
	// active root as a peer trusting only an older root needs it: the
	// active root cross-signed by its predecessor after a rotation; empty
	// otherwise.
	ChainPEM string
}

// SignIntermediate signs the intermediate CA of the secondary datacenter
// datacenter for the PEM CSR csrPEM (ca.CheckIntermediateCSR's checks),
// valid for the CAConfig's intermediate_ttl but never beyond the active
// root. A refused request is a *ca.Refusal naming the field; a server
// whose active root does not sign itself answers FailedPrecondition;
// before the CA has a root, Unavailable. (A secondary's servers never get
// here: caService refuses for them.)
func (s *Signer) SignIntermediate(_ context.Context, csrPEM []byte, datacenter string) (Intermediate, error) {
	st := s.state.Load()
	if st == nil {
		msg := errNoActiveRoot.Error()
		if b := s.broken.Load(); b != nil {
			msg = "the CA cannot sign on this server: " + (*b).Error()
		}
		return Intermediate{}, status.Error(codes.Unavailable, msg)
	}
	if !st.signingNotAfter.IsZero() {
		// The key signs under an intermediate of its own (MaxPathLen 0),
		// which cannot vouch for another CA.
		return Intermediate{}, status.Errorf(codes.FailedPrecondition,
			"this server signs with an intermediate of root %s, not with the root itself: it cannot sign another CA", st.rootID)
	}
	// The datacenter first: a request that names none is not a
	// secondary's. Refusals are not counted in the leaf metrics.
	if err := ca.CheckSecondaryDatacenter(datacenter, s.datacenter); err != nil {
		return Intermediate{}, err
	}
	csr, err := ca.ParseCSR(csrPEM)
	if err != nil {
		return Intermediate{}, err
	}
	if err := ca.CheckIntermediateCSR(csr, datacenter, ca.IntermediatePolicy{TrustDomain: st.trustDomain, PrimaryDatacenter: s.datacenter}); err != nil {
		return Intermediate{}, err
	}
	ttl := st.intermediateTTL
	if ttl <= 0 {
		ttl = ca.DefaultIntermediateTTL
	}
	cert, err := ca.SignIntermediate(csr, st.signer, ttl, s.now())
	if err != nil {
		return Intermediate{}, status.Errorf(codes.Internal, "sign the intermediate of datacenter %q: %v", datacenter, err)
	}
	s.log.Info("CA signer: signed the intermediate of a secondary datacenter", "datacenter", datacenter, "root_id", st.rootID,
		"serial", cert.SerialNumber.Text(16), "not_after", cert.NotAfter)
	return Intermediate{CertPEM: string(ca.EncodeCerts(cert)), ChainPEM: st.chainPEM}, nil
}
