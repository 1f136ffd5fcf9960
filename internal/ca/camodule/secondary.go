package camodule

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/resource"
)

// The CA manager of a secondary datacenter (seed 001's initializeSecondary
// and secondaryCARootWatch). It makes no root: it copies the primary's
// roots (same ids, the primary's trust domain: the federation has one),
// and has the primary sign an intermediate CA for a key of its own, which
// its servers sign leaves with. It reads the primary's roots again at
// every reconcile and at least every PollInterval (jittered), gets a new
// intermediate when the primary's active root changes or the one it has
// is past half its life, and keeps signing with the intermediate it has
// while the primary cannot be reached.

// DefaultPrimaryPollInterval is how often a secondary's leader reads the
// primary's roots when nothing else wakes it: a rotation in the primary
// reaches the secondary within about this long. Leaves of the old root
// stay valid meanwhile, since the primary prunes it only 2 × leaf_ttl
// after the rotation.
const DefaultPrimaryPollInterval = 30 * time.Second

func (m *Manager) pollInterval() time.Duration {
	d := m.PollInterval
	if d <= 0 {
		d = DefaultPrimaryPollInterval
	}
	r := rand.Float64
	if m.Rand != nil {
		r = m.Rand
	}
	// ±20 %, so that the secondaries of a primary do not read it in step.
	return time.Duration(float64(d) * (0.8 + 0.4*r()))
}

// reconcileSecondary is Reconcile in a secondary datacenter.
func (m *Manager) reconcileSecondary(ctx context.Context, cfgRes *pbresource.Resource) (Outcome, error) {
	out, sec, caErr := m.convergeSecondary(ctx, cfgRes)
	primary := m.PrimaryDatacenter
	next := &pbca.CAManagerStatus{State: ca.StateReady, ActiveRootId: out.ActiveRootID,
		Message: fmt.Sprintf("a secondary of datacenter %q: signs with an intermediate of the primary's active root, renewed from %s",
			primary, sec.renewAt.UTC().Format(time.RFC3339))}
	switch {
	case caErr != nil && out.ActiveRootID == "":
		next = &pbca.CAManagerStatus{State: ca.StateFailed, LastError: caErr.Error(),
			Message: fmt.Sprintf("a secondary of datacenter %q: getting the roots and an intermediate from the primary failed, and nothing is stored; retrying with backoff", primary)}
		m.log().Warn("CA initialisation from the primary failed", "err", caErr)
	case caErr != nil && sec.notAfter.IsZero():
		next = &pbca.CAManagerStatus{State: ca.StateFailed, ActiveRootId: out.ActiveRootID, LastError: caErr.Error(),
			Message: fmt.Sprintf("a secondary of datacenter %q: getting an intermediate from the primary failed, and this datacenter has none to sign with; retrying with backoff", primary)}
		m.log().Warn("CA update from the primary failed; no intermediate to sign with", "err", caErr)
	case caErr != nil:
		next = &pbca.CAManagerStatus{State: ca.StateFailed, ActiveRootId: out.ActiveRootID, LastError: caErr.Error(),
			Message: fmt.Sprintf("a secondary of datacenter %q: bringing the CA up to the primary's failed; this datacenter keeps signing with the intermediate it has (valid until %s); retrying with backoff",
				primary, sec.notAfter.UTC().Format(time.RFC3339))}
		m.log().Warn("CA update from the primary failed; signing with the intermediate this datacenter has", "err", caErr)
	}
	if err := m.report(ctx, cfgRes, next); err != nil {
		return out, errors.Join(caErr, err)
	}
	return out, caErr
}

// secondaryState is what a secondary's reconcile left: its intermediate's
// validity and when it is due for renewal.
type secondaryState struct {
	renewAt, notAfter time.Time
}

// convergeSecondary brings the stored CA to the primary's: its roots,
// and an intermediate of its active root. Nothing is stored before both
// the roots and the intermediate have been checked.
func (m *Manager) convergeSecondary(ctx context.Context, cfgRes *pbresource.Resource) (Outcome, secondaryState, error) {
	cfg, err := resource.DecodeData[*pbca.CAConfig](cfgRes)
	if err != nil {
		return Outcome{}, secondaryState{}, fmt.Errorf("decode the CA configuration: %w", err)
	}
	list, err := m.API.List(ctx, &pbresource.ListRequest{Type: ca.RootType, Tenancy: &pbresource.Tenancy{}, Consistent: true})
	if err != nil {
		return Outcome{}, secondaryState{}, fmt.Errorf("list the CA roots: %w", err)
	}
	local, err := decodeRoots(list.GetResources())
	if err != nil {
		return Outcome{}, secondaryState{}, err
	}
	have, err := m.localIntermediate(ctx, activeRoot(local))
	if err != nil {
		return Outcome{}, secondaryState{}, err
	}
	out := Outcome{ActiveRootID: have.rootID}
	sec := have.state()

	primaryRoots, err := m.Primary.Roots(ctx)
	var active *pbca.CARoot
	if err == nil {
		active, err = ca.CheckPrimaryRoots(primaryRoots, m.PrimaryDatacenter)
	}
	if err != nil {
		return out, sec, fmt.Errorf("read the roots of the primary datacenter %q: %w", m.PrimaryDatacenter, err)
	}
	activeCerts, err := ca.ParseCerts([]byte(active.GetRootCert()))
	if err != nil {
		return out, sec, err
	}
	now := m.now()
	want := have
	var keyPEM []byte
	if reason := ca.IntermediateReason(active.GetId(), activeCerts[0], have.rootID, have.cert, now); reason != "" {
		if want, keyPEM, err = m.newIntermediate(ctx, cfg, active, activeCerts[0], now); err != nil {
			return out, sec, fmt.Errorf("get an intermediate from the primary datacenter %q (%s): %w", m.PrimaryDatacenter, reason, err)
		}
		m.log().Info("the primary signed a new intermediate", "root_id", active.GetId(),
			"reason", reason, "not_after", want.cert.NotAfter)
	}
	if err := m.storePrimaryRoots(ctx, primaryRoots, want, keyPEM, list.GetResources(), local); err != nil {
		return out, sec, err
	}
	out.ActiveRootID = active.GetId()
	sec = want.state()
	out.Recheck = now.Add(m.pollInterval())
	if sec.renewAt.Before(out.Recheck) {
		out.Recheck = sec.renewAt
	}
	return out, sec, nil
}

// intermediate is the intermediate a secondary signs with: the root it
// is of, and the certificate.
type intermediate struct {
	rootID string
	cert   *x509.Certificate
}

func (i intermediate) state() secondaryState {
	if i.cert == nil {
		return secondaryState{}
	}
	return secondaryState{renewAt: ca.RenewAt(i.cert.NotBefore, i.cert.NotAfter), notAfter: i.cert.NotAfter}
}

// localIntermediate reads the intermediate stored for the active root
// (none when there is no active root or no key for it).
func (m *Manager) localIntermediate(ctx context.Context, active *storedRoot) (intermediate, error) {
	if active == nil {
		return intermediate{}, nil
	}
	out := intermediate{rootID: active.root.GetId()}
	resp, err := m.API.Read(ctx, &pbresource.ReadRequest{Id: ca.SigningKeyID(active.res.GetId().GetName())})
	if status.Code(err) == codes.NotFound {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("read the signing key of the active root %s: %w", active.root.GetId(), err)
	}
	sk, err := resource.DecodeData[*pbca.CASigningKey](resp.GetResource())
	if err != nil {
		return out, fmt.Errorf("decode the signing key of the active root %s: %w", active.root.GetId(), err)
	}
	certs, err := ca.ParseCerts([]byte(sk.GetSigningCert()))
	if err != nil {
		return out, fmt.Errorf("the intermediate of the active root %s: %w", active.root.GetId(), err)
	}
	out.cert = certs[0]
	return out, nil
}

// newIntermediate makes a key of the configured type, has the primary
// sign an intermediate for it under its active root, and checks the
// answer. It returns the intermediate and the key's PEM, to store sealed;
// no error quotes the key.
func (m *Manager) newIntermediate(ctx context.Context, cfg *pbca.CAConfig, active *pbca.CARoot, activeCert *x509.Certificate, now time.Time) (intermediate, []byte, error) {
	kt := ca.KeyType{Algorithm: cfg.GetPrivateKeyType(), Bits: int(cfg.GetPrivateKeyBits())}
	key, err := ca.GenerateKey(kt)
	if err != nil {
		return intermediate{}, nil, err
	}
	csr, err := ca.NewIntermediateCSR(key, active.GetTrustDomain(), m.datacenter())
	if err != nil {
		return intermediate{}, nil, err
	}
	ans, err := m.Primary.SignIntermediate(ctx, csr, m.datacenter())
	if err != nil {
		return intermediate{}, nil, err
	}
	cert, _, err := ca.CheckIntermediate([]byte(ans.CertPEM), []byte(ans.ChainPEM), key.Public(), activeCert, now)
	if err != nil {
		return intermediate{}, nil, fmt.Errorf("%w: what it signed: %v", ca.ErrNotPrimary, err)
	}
	keyPEM, err := ca.EncodeKey(key)
	if err != nil {
		return intermediate{}, nil, errors.New("encode the intermediate's key")
	}
	return intermediate{rootID: active.GetId(), cert: cert}, keyPEM, nil
}

// storePrimaryRoots stores the primary's roots as this datacenter's, the
// active one with the intermediate as its signing_cert, with the
// intermediate's key when it is new, in one batch that holds only if no
// CARoot changed since the list. The roots keep the primary's
// intermediate_certs (the cross-signed root after a rotation): the
// signers put the signing certificate before them, so that leaves carry
// [intermediate, cross-signed root]. The intermediate is kept out of
// intermediate_certs so that a signer that sees the new root before the
// new key (they are separate watches) never pairs an intermediate with
// another's chain. Then it deletes the roots the primary no longer has and
// the keys of roots no longer active. Roots that did not change are not
// written.
func (m *Manager) storePrimaryRoots(ctx context.Context, primary []*pbca.CARoot, inter intermediate, keyPEM []byte, listed []*pbresource.Resource, local []storedRoot) error {
	byName := make(map[string]storedRoot, len(local))
	for _, r := range local {
		byName[r.res.GetId().GetName()] = r
	}
	interPEM := string(ca.EncodeCerts(inter.cert))
	keep := map[string]bool{}
	activeName := ""
	var batch []*pbresource.Resource
	for _, r := range primary {
		name := ca.RootName(r.GetId())
		keep[name] = true
		want := proto.Clone(r).(*pbca.CARoot)
		if r.GetActive() {
			activeName = name
			want.SigningCert = interPEM
		}
		version := resource.CreateOnly
		if have, ok := byName[name]; ok {
			if proto.Equal(have.root, want) {
				continue
			}
			version = have.res.GetVersion()
		}
		data, err := anypb.New(want)
		if err != nil {
			return err
		}
		batch = append(batch, &pbresource.Resource{Id: ca.RootID(name), Version: version, Data: data})
	}
	if keyPEM != nil {
		data, err := anypb.New(&pbca.CASigningKey{RootId: inter.rootID, PrivateKey: string(keyPEM), SigningCert: interPEM})
		if err != nil {
			return err
		}
		batch = append(batch, &pbresource.Resource{Id: ca.SigningKeyID(activeName), Data: data})
	}
	if len(batch) > 0 {
		_, err := m.API.WriteBatch(ctx, &pbresource.WriteBatchRequest{
			Resources: batch,
			Compares: []*pbresource.Compare{{
				Op: pbresource.Compare_OP_NOTHING_NEWER, Id: &pbresource.ID{Type: ca.RootType, Tenancy: &pbresource.Tenancy{}}, Version: newestVersion(listed),
			}},
		})
		if err != nil {
			// Never the key in an error: the batch's errors name fields.
			return fmt.Errorf("store the primary's roots: %w", err)
		}
	}
	keys, err := m.API.List(ctx, &pbresource.ListRequest{Type: ca.SigningKeyType, Tenancy: &pbresource.Tenancy{}})
	if err != nil {
		return fmt.Errorf("list the signing keys: %w", err)
	}
	for _, k := range keys.GetResources() {
		if name := k.GetId().GetName(); name != activeName {
			if _, err := m.API.Delete(ctx, &pbresource.DeleteRequest{Id: k.GetId()}); err != nil && status.Code(err) != codes.NotFound {
				return fmt.Errorf("delete the signing key of root %s, no longer active: %w", name, err)
			}
		}
	}
	for name, r := range byName {
		if keep[name] {
			continue
		}
		if _, err := m.API.Delete(ctx, &pbresource.DeleteRequest{Id: r.res.GetId(), Version: r.res.GetVersion()}); err != nil && status.Code(err) != codes.NotFound {
			return fmt.Errorf("delete the root %s, which the primary pruned: %w", r.root.GetId(), err)
		}
		m.log().Info("deleted a CA root the primary pruned", "root_id", r.root.GetId())
	}
	return nil
}
