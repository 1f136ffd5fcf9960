package camodule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/tlsutil"
)

// ManagerName is the name of the CA manager's controller.
const ManagerName = "ca-manager"

// Manager is the CA manager: on the leader, it writes the default
// CAConfig when there is none and generates the cluster's root when no
// root is active. It reports on the CAConfig under ca.ManagerStatusKey.
type Manager struct {
	API        resource.API
	Now        func() time.Time // time.Now when nil
	Datacenter string           // tlsutil.DefaultDatacenter when empty
	Logger     *slog.Logger     // discards when nil
}

func (m *Manager) datacenter() string {
	if m.Datacenter != "" {
		return m.Datacenter
	}
	return tlsutil.DefaultDatacenter
}

func (m *Manager) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

func (m *Manager) log() *slog.Logger {
	if m.Logger != nil {
		return m.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// toConfig maps any change of a watched type to the one CAConfig: the
// manager has a single thing to converge, the cluster's CA.
func toConfig(controller.Event, controller.Lookup) []controller.Request {
	return []controller.Request{{ID: ca.ConfigID()}}
}

// Controller is the manager as a controller. It watches the cluster's
// identity so that it runs on every gain of leadership even when no
// CAConfig exists yet, and the roots so that a root removed or changed
// behind its back is looked at again.
func (m *Manager) Controller() controller.Controller {
	return controller.Controller{
		Name:        ManagerName,
		ManagedType: ca.ConfigType,
		Watches: []controller.Watch{
			{Type: ca.ConfigType, Map: toConfig},
			{Type: core.ClusterType, Map: toConfig},
			{Type: ca.RootType, Map: toConfig},
		},
		Reconciler: controller.ReconcileFunc(func(ctx context.Context, _ controller.Request) error {
			_, err := m.Reconcile(ctx)
			return err
		}),
		Workers: 1,
	}
}

// Reconcile initialises the CA and reports the outcome on the CAConfig.
// It returns the active root's id, or the error that stopped it (the
// controller runtime retries it with backoff).
func (m *Manager) Reconcile(ctx context.Context) (string, error) {
	ctx = resource.FromOperations(ctx)
	cfgRes, err := m.ensureConfig(ctx)
	if err != nil {
		return "", err
	}
	rootID, initErr := m.Initialize(ctx, cfgRes)
	next := &pbca.CAManagerStatus{State: ca.StateReady, ActiveRootId: rootID, Message: "one active root"}
	if initErr != nil {
		next = &pbca.CAManagerStatus{State: ca.StateFailed, Message: "initialising the CA failed; retrying with backoff", LastError: initErr.Error()}
		m.log().Warn("CA initialisation failed", "err", initErr)
	}
	if err := m.report(ctx, cfgRes, next); err != nil {
		return rootID, errors.Join(initErr, err)
	}
	return rootID, initErr
}

// ensureConfig reads the CAConfig, writing the default one when there is
// none. A concurrent create (Aborted) is answered by reading it again.
func (m *Manager) ensureConfig(ctx context.Context) (*pbresource.Resource, error) {
	resp, err := m.API.Read(ctx, &pbresource.ReadRequest{Id: ca.ConfigID()})
	if err == nil {
		return resp.GetResource(), nil
	}
	if status.Code(err) != codes.NotFound {
		return nil, fmt.Errorf("read the CA configuration: %w", err)
	}
	c := &pbca.CAConfig{}
	ca.FillConfigDefaults(c)
	data, err := anypb.New(c)
	if err != nil {
		return nil, err
	}
	w, err := m.API.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{
		Id: ca.ConfigID(), Version: resource.CreateOnly, Data: data,
	}})
	if status.Code(err) == codes.Aborted {
		resp, err := m.API.Read(ctx, &pbresource.ReadRequest{Id: ca.ConfigID()})
		if err != nil {
			return nil, fmt.Errorf("read the CA configuration: %w", err)
		}
		return resp.GetResource(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("write the default CA configuration: %w", err)
	}
	m.log().Info("wrote the default CA configuration")
	return w.GetResource(), nil
}

// Initialize makes sure the cluster has an active root and returns its
// id: the one it finds, or a new one it generates with the settings of
// cfgRes. ctx must be FromOperations (the signing key is sealed).
func (m *Manager) Initialize(ctx context.Context, cfgRes *pbresource.Resource) (string, error) {
	cfg, err := resource.DecodeData[*pbca.CAConfig](cfgRes)
	if err != nil {
		return "", fmt.Errorf("decode the CA configuration: %w", err)
	}
	list, err := m.API.List(ctx, &pbresource.ListRequest{Type: ca.RootType, Tenancy: &pbresource.Tenancy{}, Consistent: true})
	if err != nil {
		return "", fmt.Errorf("list the CA roots: %w", err)
	}
	roots, err := decodeRoots(list.GetResources())
	if err != nil {
		return "", err
	}
	if active := activeRoot(roots); active != nil {
		return active.GetId(), nil
	}
	if cfg.GetRootCert() != "" {
		// TODO(ca): a supplied root comes with its key through
		// /v1/ca/config, which is not built yet.
		return "", errors.New("root_cert: a supplied root is not supported yet; remove it to have the CA generate one")
	}
	clusterID, err := core.ClusterID(ctx, m.API)
	if err != nil {
		return "", err
	}
	return m.generate(ctx, cfg, ca.TrustDomain(clusterID), newestVersion(list.GetResources()))
}

// generate makes a root and writes it, active, with its signing key, in
// one batch that holds only if no root was created or changed since the
// list at version since.
func (m *Manager) generate(ctx context.Context, cfg *pbca.CAConfig, trustDomain, since string) (string, error) {
	now := m.now()
	kt := ca.KeyType{Algorithm: cfg.GetPrivateKeyType(), Bits: int(cfg.GetPrivateKeyBits())}
	cert, key, err := ca.NewRoot(ca.RootOptions{TrustDomain: trustDomain, KeyType: kt, TTL: cfg.GetRootTtl().AsDuration(), Now: now})
	if err != nil {
		return "", fmt.Errorf("generate a root: %w", err)
	}
	id, err := ca.KeyID(cert.PublicKey)
	if err != nil {
		return "", fmt.Errorf("generate a root: %w", err)
	}
	keyPEM, err := ca.EncodeKey(key)
	if err != nil {
		return "", fmt.Errorf("generate a root: encode its key: %w", err)
	}
	certPEM := string(ca.EncodeCerts(cert))
	name := ca.RootName(id)
	rootData, err := anypb.New(&pbca.CARoot{
		Id: id, TrustDomain: trustDomain, RootCert: certPEM, SigningCert: certPEM, Active: true,
		NotBefore: timestamppb.New(cert.NotBefore), NotAfter: timestamppb.New(cert.NotAfter),
		PrivateKeyType: kt.Algorithm, PrivateKeyBits: int32(kt.Bits), Rotation: cfg.GetRotation(),
		Datacenter: m.datacenter(),
	})
	if err != nil {
		return "", err
	}
	keyData, err := anypb.New(&pbca.CASigningKey{RootId: id, PrivateKey: string(keyPEM), SigningCert: certPEM})
	if err != nil {
		return "", err
	}
	_, err = m.API.WriteBatch(ctx, &pbresource.WriteBatchRequest{
		Resources: []*pbresource.Resource{
			{Id: ca.RootID(name), Version: resource.CreateOnly, Data: rootData},
			{Id: ca.SigningKeyID(name), Version: resource.CreateOnly, Data: keyData},
		},
		Compares: []*pbresource.Compare{{
			Op: pbresource.Compare_OP_NOTHING_NEWER, Id: &pbresource.ID{Type: ca.RootType, Tenancy: &pbresource.Tenancy{}}, Version: since,
		}},
	})
	if err != nil {
		// Never the key in an error: the batch's errors name fields only,
		// and this one says what was being written.
		return "", fmt.Errorf("write the new root %s: %w", id, err)
	}
	m.log().Info("generated the CA root", "root_id", id, "trust_domain", trustDomain, "not_after", cert.NotAfter)
	return id, nil
}

// report writes the manager's status on the CAConfig when it differs
// from the stored one in anything but the time of the attempt, so that a
// failure repeated by the retries does not write (and wake the
// controller) on every attempt.
func (m *Manager) report(ctx context.Context, cfgRes *pbresource.Resource, next *pbca.CAManagerStatus) error {
	if stored := cfgRes.GetStatus()[ca.ManagerStatusKey]; stored != nil {
		var prev pbca.CAManagerStatus
		if stored.GetData().UnmarshalTo(&prev) == nil && sameStatus(&prev, next) {
			return nil
		}
	}
	next.LastAttempt = timestamppb.New(m.now())
	data, err := anypb.New(next)
	if err != nil {
		return err
	}
	_, err = m.API.WriteStatus(ctx, &pbresource.WriteStatusRequest{
		Id: cfgRes.GetId(), Key: ca.ManagerStatusKey,
		Status: &pbresource.Status{ObservedGeneration: cfgRes.GetGeneration(), Data: data},
	})
	if err != nil {
		return fmt.Errorf("report the CA manager's status: %w", err)
	}
	return nil
}

func sameStatus(a, b *pbca.CAManagerStatus) bool {
	return a.GetState() == b.GetState() && a.GetActiveRootId() == b.GetActiveRootId() &&
		a.GetLastError() == b.GetLastError() && a.GetMessage() == b.GetMessage()
}

func decodeRoots(list []*pbresource.Resource) ([]*pbca.CARoot, error) {
	out := make([]*pbca.CARoot, 0, len(list))
	for _, res := range list {
		r, err := resource.DecodeData[*pbca.CARoot](res)
		if err != nil {
			return nil, fmt.Errorf("decode the CA root %s: %w", res.GetId().GetName(), err)
		}
		out = append(out, r)
	}
	return out, nil
}

// activeRoot returns the active root of roots, or nil.
func activeRoot(roots []*pbca.CARoot) *pbca.CARoot {
	for _, r := range roots {
		if r.GetActive() {
			return r
		}
	}
	return nil
}

// newestVersion is the largest version of list, the version an
// OP_NOTHING_NEWER compare takes to say "nothing of this list changed";
// "" for an empty list (an empty range).
func newestVersion(list []*pbresource.Resource) string {
	var newest uint64
	out := ""
	for _, res := range list {
		v, err := strconv.ParseUint(res.GetVersion(), 10, 64)
		if err == nil && (out == "" || v > newest) {
			newest, out = v, res.GetVersion()
		}
	}
	return out
}
