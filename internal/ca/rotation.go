package ca

import (
	"fmt"

	pbca "trellis.dev/trellis/api/ca/v1"
)

// RotationReason says why the active root no longer answers the
// configuration c, or "" when it does. The CA manager rotates to a new
// root whenever it is not "":
//
//   - c supplies a root (root_cert) that is not the active root: the
//     supplied root becomes active. While the supplied root is the active
//     one, nothing else in c asks for a rotation: its key type is the
//     supplied key's, and a raised rotation cannot make another root
//     out of the same certificate (the CA's route refuses one);
//   - c asks for another key type or size than the active root's;
//   - c.rotation differs from the rotation the active root was made for
//     ("trellis ca rotate" raises it).
//
// The error says that c.root_cert does not parse, which the checks on a
// stored CAConfig make impossible.
func RotationReason(c *pbca.CAConfig, active *pbca.CARoot) (string, error) {
	if certPEM := c.GetRootCert(); certPEM != "" {
		certs, err := ParseCerts([]byte(certPEM))
		if err != nil {
			return "", fmt.Errorf("root_cert: %w", err)
		}
		id, err := KeyID(certs[0].PublicKey)
		if err != nil {
			return "", fmt.Errorf("root_cert: %w", err)
		}
		if id == active.GetId() {
			return "", nil
		}
		return "a supplied root replaces the active one", nil
	}
	want := KeyType{Algorithm: c.GetPrivateKeyType(), Bits: int(c.GetPrivateKeyBits())}
	have := KeyType{Algorithm: active.GetPrivateKeyType(), Bits: int(active.GetPrivateKeyBits())}
	if want != have {
		return fmt.Sprintf("the key type changes from %s to %s", have, want), nil
	}
	if c.GetRotation() != active.GetRotation() {
		return fmt.Sprintf("rotation changes from %d to %d", active.GetRotation(), c.GetRotation()), nil
	}
	return "", nil
}
