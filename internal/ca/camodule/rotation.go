package camodule

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/resource"
)

// The making of roots: the first one, and each rotation to a new one.
// Every root is written in one batch with its signing key (a generated
// root's; a supplied root's key is already stored by the CA's route) and,
// for a rotation, the old root rotated out; the batch holds only if no
// CARoot was created or changed since the manager listed them, so two
// managers in a row never make two roots.

// newRootMaterial is a root about to be written and its key.
type newRootMaterial struct {
	id       string
	cert     *x509.Certificate
	key      crypto.Signer
	keyPEM   []byte // set for a generated root: its key is written with it
	supplied bool
}

// newRoot makes the root the configuration asks for: the supplied one
// (root_cert), with the key the CA's route stored for it, or a new one
// with the configured key type and root TTL. Errors never quote a key.
func (m *Manager) newRoot(ctx context.Context, cfg *pbca.CAConfig, trustDomain string) (newRootMaterial, error) {
	now := m.now()
	if certPEM := cfg.GetRootCert(); certPEM != "" {
		return m.suppliedRoot(ctx, certPEM)
	}
	kt := ca.KeyType{Algorithm: cfg.GetPrivateKeyType(), Bits: int(cfg.GetPrivateKeyBits())}
	cert, key, err := ca.NewRoot(ca.RootOptions{TrustDomain: trustDomain, KeyType: kt, TTL: cfg.GetRootTtl().AsDuration(), Now: now})
	if err != nil {
		return newRootMaterial{}, fmt.Errorf("generate a root: %w", err)
	}
	id, err := ca.KeyID(cert.PublicKey)
	if err != nil {
		return newRootMaterial{}, fmt.Errorf("generate a root: %w", err)
	}
	keyPEM, err := ca.EncodeKey(key)
	if err != nil {
		return newRootMaterial{}, fmt.Errorf("generate a root: encode its key: %w", err)
	}
	return newRootMaterial{id: id, cert: cert, key: key, keyPEM: keyPEM}, nil
}

// suppliedRoot reads the key the CA's route stored for the supplied root
// certPEM, and checks the pair again at the manager's now (it may have
// expired since it was given).
func (m *Manager) suppliedRoot(ctx context.Context, certPEM string) (newRootMaterial, error) {
	certs, err := ca.ParseCerts([]byte(certPEM))
	if err != nil {
		return newRootMaterial{}, resource.NewFieldError("root_cert", "%v", err)
	}
	id, err := ca.KeyID(certs[0].PublicKey)
	if err != nil {
		return newRootMaterial{}, resource.NewFieldError("root_cert", "%v", err)
	}
	resp, err := m.API.Read(ctx, &pbresource.ReadRequest{Id: ca.SigningKeyID(ca.RootName(id))})
	if status.Code(err) == codes.NotFound {
		return newRootMaterial{}, resource.NewFieldError("root_cert", "the private key of the supplied root %s is not stored: give root_cert with its private_key to PUT /v1/ca/config", id)
	}
	if err != nil {
		return newRootMaterial{}, fmt.Errorf("read the signing key of the supplied root %s: %w", id, err)
	}
	sk, err := resource.DecodeData[*pbca.CASigningKey](resp.GetResource())
	if err != nil {
		return newRootMaterial{}, fmt.Errorf("decode the signing key of the supplied root %s: %w", id, err)
	}
	cert, key, err := ca.CheckSuppliedRoot([]byte(certPEM), []byte(sk.GetPrivateKey()), m.now())
	if err != nil {
		return newRootMaterial{}, err
	}
	return newRootMaterial{id: id, cert: cert, key: key, supplied: true}, nil
}

// rotate makes the root cfg asks for, cross-signs it with the active
// root's key, and writes it active with intermediate_certs = [the
// cross-signed certificate] (what its leaves carry in their chain), with
// the old root rotated out, in one batch. It returns the new root's id.
func (m *Manager) rotate(ctx context.Context, cfg *pbca.CAConfig, old *storedRoot, roots []*pbresource.Resource, reason string) (string, error) {
	now := m.now()
	nr, err := m.newRoot(ctx, cfg, old.root.GetTrustDomain())
	if err != nil {
		return "", err
	}
	oldSigner, err := m.signer(ctx, old.root)
	if err != nil {
		return "", err
	}
	var intermediates []string
	if now.Before(oldSigner.Cert.NotAfter) {
		cross, err := ca.CrossSign(nr.cert, oldSigner, now)
		if err != nil {
			return "", fmt.Errorf("cross-sign the new root %s with the old root %s: %w", nr.id, old.root.GetId(), err)
		}
		intermediates = []string{string(ca.EncodeCerts(cross))}
	} else {
		// An expired root vouches for nothing: its peers refuse every
		// chain to it already, so there is nothing to cross-sign for.
		m.log().Warn("the old CA root has expired: the new root is not cross-signed", "old_root_id", old.root.GetId())
	}
	newRes, err := m.rootResource(nr, old.root.GetTrustDomain(), cfg, intermediates, roots)
	if err != nil {
		return "", err
	}
	retired := proto.Clone(old.root).(*pbca.CARoot)
	retired.Active = false
	retired.RotatedOutAt = timestamppb.New(now)
	retired.MaxLeafTtl = durationpb.New(max(retired.GetMaxLeafTtl().AsDuration(), cfg.GetLeafTtl().AsDuration()))
	retiredData, err := anypb.New(retired)
	if err != nil {
		return "", err
	}
	oldRes := &pbresource.Resource{Id: old.res.GetId(), Version: old.res.GetVersion(), Data: retiredData}
	if err := m.writeRoots(ctx, nr, []*pbresource.Resource{newRes, oldRes}, roots); err != nil {
		return "", err
	}
	m.log().Info("rotated the CA root", "old_root_id", old.root.GetId(), "new_root_id", nr.id, "reason", reason,
		"supplied", nr.supplied, "cross_signed", len(intermediates) > 0, "not_after", nr.cert.NotAfter)
	return nr.id, nil
}

// signer reads the signing key of root as a ca.Signer of its root
// certificate: what cross-signs its successor.
func (m *Manager) signer(ctx context.Context, root *pbca.CARoot) (ca.Signer, error) {
	certs, err := ca.ParseCerts([]byte(root.GetRootCert()))
	if err != nil {
		return ca.Signer{}, fmt.Errorf("the root certificate of %s: %w", root.GetId(), err)
	}
	resp, err := m.API.Read(ctx, &pbresource.ReadRequest{Id: ca.SigningKeyID(ca.RootName(root.GetId()))})
	if err != nil {
		return ca.Signer{}, fmt.Errorf("read the signing key of the active root %s: %w", root.GetId(), err)
	}
	sk, err := resource.DecodeData[*pbca.CASigningKey](resp.GetResource())
	if err != nil {
		return ca.Signer{}, fmt.Errorf("decode the signing key of the active root %s: %w", root.GetId(), err)
	}
	key, err := ca.ParseKey([]byte(sk.GetPrivateKey()))
	if err != nil {
		return ca.Signer{}, fmt.Errorf("the signing key of the active root %s: %w", root.GetId(), err)
	}
	return ca.Signer{Cert: certs[0], Key: key}, nil
}

// rootResource is the CARoot of nr, active, as a resource to write: a new
// one, or (a supplied root that was once rotated out) the stored one of
// that name brought back.
func (m *Manager) rootResource(nr newRootMaterial, trustDomain string, cfg *pbca.CAConfig, intermediates []string, roots []*pbresource.Resource) (*pbresource.Resource, error) {
	kt, err := ca.KeyTypeOf(nr.cert.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("the new root's key: %w", err)
	}
	certPEM := string(ca.EncodeCerts(nr.cert))
	data, err := anypb.New(&pbca.CARoot{
		Id: nr.id, TrustDomain: trustDomain, RootCert: certPEM, SigningCert: certPEM, Active: true,
		IntermediateCerts: intermediates,
		NotBefore:         timestamppb.New(nr.cert.NotBefore), NotAfter: timestamppb.New(nr.cert.NotAfter),
		PrivateKeyType: kt.Algorithm, PrivateKeyBits: int32(kt.Bits), Rotation: cfg.GetRotation(),
		Datacenter: m.datacenter(), MaxLeafTtl: cfg.GetLeafTtl(),
	})
	if err != nil {
		return nil, err
	}
	name := ca.RootName(nr.id)
	version := resource.CreateOnly
	for _, res := range roots {
		if res.GetId().GetName() == name {
			version = res.GetVersion()
		}
	}
	return &pbresource.Resource{Id: ca.RootID(name), Version: version, Data: data}, nil
}

// writeRoots writes rootRes (the new root first) and, for a generated
// root, its signing key, in one batch that holds only if no CARoot was
// created or changed since the list roots.
func (m *Manager) writeRoots(ctx context.Context, nr newRootMaterial, rootRes []*pbresource.Resource, roots []*pbresource.Resource) error {
	batch := append([]*pbresource.Resource(nil), rootRes...)
	if nr.keyPEM != nil {
		certPEM := string(ca.EncodeCerts(nr.cert))
		keyData, err := anypb.New(&pbca.CASigningKey{RootId: nr.id, PrivateKey: string(nr.keyPEM), SigningCert: certPEM})
		if err != nil {
			return err
		}
		batch = append(batch, &pbresource.Resource{Id: ca.SigningKeyID(ca.RootName(nr.id)), Version: resource.CreateOnly, Data: keyData})
	}
	_, err := m.API.WriteBatch(ctx, &pbresource.WriteBatchRequest{
		Resources: batch,
		Compares: []*pbresource.Compare{{
			Op: pbresource.Compare_OP_NOTHING_NEWER, Id: &pbresource.ID{Type: ca.RootType, Tenancy: &pbresource.Tenancy{}}, Version: newestVersion(roots),
		}},
	})
	if err != nil {
		// Never the key in an error: the batch's errors name fields only,
		// and this one says what was being written.
		return fmt.Errorf("write the new root %s: %w", nr.id, err)
	}
	return nil
}
