package ca

import (
	"bytes"
	"crypto/x509"
	"fmt"

	pbca "trellis.dev/trellis/api/ca/v1"
)

// DatacenterSigners decides which CA certificates sign the leaves of
// datacenter, from the roots its servers store: the CAs a server port
// takes a server leaf of that datacenter from (tlsutil's
// SetConnectRoots), so that a server leaf is a leaf of the datacenter's
// own CA, never of another datacenter's intermediate nor of any CA that
// merely chains to a root.
//
//   - In the primary (the roots were made in datacenter), every root,
//     active or not (leaves signed before a rotation stay valid), and
//     each root's signing certificate where it is not the root itself.
//   - In a secondary (the roots are copies of the primary's), the
//     signing certificates that are not the root itself: the
//     intermediate the primary signed for this datacenter, which the
//     active root carries. The primary's roots themselves sign no leaf
//     of a secondary.
//
// A root or signing certificate that does not parse is skipped and
// named in the error, beside the signers that did.
func DatacenterSigners(roots []*pbca.CARoot, datacenter string) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	var bad []string
	for _, r := range roots {
		rootCerts, err := ParseCerts([]byte(r.GetRootCert()))
		if err != nil {
			bad = append(bad, fmt.Sprintf("root %s: root_cert: %v", r.GetId(), err))
			continue
		}
		root := rootCerts[0]
		primary := r.GetDatacenter() == datacenter
		if primary {
			out = append(out, root)
		}
		if r.GetSigningCert() == "" {
			continue
		}
		signing, err := ParseCerts([]byte(r.GetSigningCert()))
		if err != nil {
			bad = append(bad, fmt.Sprintf("root %s: signing_cert: %v", r.GetId(), err))
			continue
		}
		if !bytes.Equal(signing[0].Raw, root.Raw) {
			out = append(out, signing[0])
		}
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("skipped: %v", bad)
	}
	return out, nil
}
