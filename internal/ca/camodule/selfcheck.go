package camodule

import (
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The signer's check of its own leaves. The leaf encoder (ca.LeafIssuer)
// does not verify each signature it makes, as x509.CreateCertificate
// does: that verification cost as much as the CSR's and nearly three
// times the signature itself. What it guarded against, a signing key or
// signer that makes signatures no peer will accept, is caught here
// instead: the first leaf of each signing key on this server is verified
// before it is handed out (and every leaf after it, until one has
// verified), and then one leaf in selfCheckEvery. A key whose leaf does
// not verify signs nothing more on this server: every request is
// answered Unavailable, so agents go to another server, and the failure
// is logged and counted (trellis_ca_leaf_self_checks_total{result=
// "failed"}) until a new key (a rotation) or a restart.

// selfCheckEvery is the sampling interval once a key is proven: one leaf
// in 1,000 costs a verification (~115 µs for P-256), about 0.1 µs a leaf.
const selfCheckEvery = 1000

// checkDue decides whether the n-th leaf (from 0) a key signs on this
// server is verified before it is handed out: every one until a leaf of
// the key has verified (proven), then one in selfCheckEvery.
func checkDue(proven bool, n uint64) bool {
	return !proven || n%selfCheckEvery == 0
}

// selfCheck is the record of one signing key's checks on this server.
// A signingState holds one, shared by the states that keep the same
// parsed key.
type selfCheck struct {
	issued atomic.Uint64
	proven atomic.Bool
	// failed is why the key signs no more: the first failed check.
	failed atomic.Pointer[error]
}

// due counts one more leaf and says whether it is to be verified.
func (c *selfCheck) due() bool {
	n := c.issued.Add(1) - 1
	return checkDue(c.proven.Load(), n)
}

// refusal is the error every request gets once the key has failed a
// check; nil while it has not.
func (c *selfCheck) refusal(rootID string) error {
	e := c.failed.Load()
	if e == nil {
		return nil
	}
	return status.Errorf(codes.Unavailable,
		"the CA signs no more on this server: a leaf signed with the key of root %s did not verify (%v); ask another server", rootID, *e)
}

// fail records a failed check; the first failure is the one reported.
func (c *selfCheck) fail(err error) {
	c.failed.CompareAndSwap(nil, &err)
}
