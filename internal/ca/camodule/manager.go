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

// ManagerName is the name of the CA manager's controller: the owner of
// the CAConfig's status key of that name.
const ManagerName = ca.ManagerStatusKey

// Manager is the CA manager: on the leader, it writes the default
// CAConfig when there is none, makes the cluster's root when no root is
// active, rotates to a new root when the configuration asks for one, and
// prunes the roots rotated out once no leaf they signed can still be
// valid. It reports on the CAConfig under ca.ManagerStatusKey.
type Manager struct {
	API        resource.API
	Now        func() time.Time // time.Now when nil
	Datacenter string           // tlsutil.DefaultDatacenter when empty
	Logger     *slog.Logger     // discards when nil

	// Primary, in a secondary datacenter, is the primary's CA, which the
	// manager takes its roots and intermediate from instead of making a
	// root (see secondary.go); nil in the primary.
	Primary PrimaryCA
	// PrimaryDatacenter is the primary's datacenter, with Primary.
	PrimaryDatacenter string
	// PollInterval is how often a secondary reads the primary's roots
	// when nothing else wakes it (DefaultPrimaryPollInterval when zero),
	// jittered by ±20 % with Rand (math/rand/v2's when nil).
	PollInterval time.Duration
	Rand         func() float64
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
			out, err := m.Reconcile(ctx)
			if err != nil {
				return err
			}
			next := out.NextPrune
			if !out.Recheck.IsZero() && (next.IsZero() || out.Recheck.Before(next)) {
				next = out.Recheck
			}
			if !next.IsZero() {
				// Run again when the next root is due to be pruned (a
				// secondary: when it reads the primary again or renews
				// its intermediate); any change of the CA's resources
				// runs it sooner.
				return controller.RequeueAfter(max(next.Sub(m.now()), time.Second))
			}
			return nil
		}),
		Workers: 1,
	}
}

// Outcome is what a reconcile of the manager left.
type Outcome struct {
	// ActiveRootID is the id of the active root: the one found, the one
	// made, or the one rotated to; "" when there is none.
	ActiveRootID string
	// RotatedOut is the id of the root this reconcile rotated out, "" when
	// it rotated none.
	RotatedOut string
	// Pruned are the ids of the roots this reconcile deleted.
	Pruned []string
	// NextPrune is when a root rotated out is next due to be pruned; zero
	// when none waits.
	NextPrune time.Time
	// Recheck, in a secondary, is when to read the primary's roots again
	// or renew the intermediate, whichever comes first.
	Recheck time.Time
}

// Reconcile brings the CA to its configuration and reports the outcome
// on the CAConfig: it makes the first root when none is active, rotates
// to a new one when the active root no longer answers the configuration
// (ca.RotationReason), and prunes the roots rotated out long enough ago
// (ca.RootsToPrune). It returns what it did, or the error that stopped it
// (the controller runtime retries it with backoff); a failed rotation
// leaves the old root active.
func (m *Manager) Reconcile(ctx context.Context) (Outcome, error) {
	ctx = resource.AsController(resource.FromOperations(ctx), ManagerName)
	cfgRes, err := m.ensureConfig(ctx)
	if err != nil {
		return Outcome{}, err
	}
	if m.Primary != nil {
		return m.reconcileSecondary(ctx, cfgRes)
	}
	out, caErr := m.converge(ctx, cfgRes)
	next := &pbca.CAManagerStatus{State: ca.StateReady, ActiveRootId: out.ActiveRootID, Message: "one active root"}
	switch {
	case caErr != nil && out.ActiveRootID == "":
		next = &pbca.CAManagerStatus{State: ca.StateFailed, Message: "initialising the CA failed; retrying with backoff", LastError: caErr.Error()}
		m.log().Warn("CA initialisation failed", "err", caErr)
	case caErr != nil:
		next = &pbca.CAManagerStatus{State: ca.StateFailed, ActiveRootId: out.ActiveRootID,
			Message: "bringing the CA to its configuration failed; the active root is unchanged; retrying with backoff", LastError: caErr.Error()}
		m.log().Warn("CA configuration change failed; the active root is unchanged", "active_root_id", out.ActiveRootID, "err", caErr)
	}
	if err := m.report(ctx, cfgRes, next); err != nil {
		return out, errors.Join(caErr, err)
	}
	return out, caErr
}

// converge does Reconcile's work on the configuration cfgRes.
func (m *Manager) converge(ctx context.Context, cfgRes *pbresource.Resource) (Outcome, error) {
	cfg, err := resource.DecodeData[*pbca.CAConfig](cfgRes)
	if err != nil {
		return Outcome{}, fmt.Errorf("decode the CA configuration: %w", err)
	}
	list, err := m.API.List(ctx, &pbresource.ListRequest{Type: ca.RootType, Tenancy: &pbresource.Tenancy{}, Consistent: true})
	if err != nil {
		return Outcome{}, fmt.Errorf("list the CA roots: %w", err)
	}
	roots, err := decodeRoots(list.GetResources())
	if err != nil {
		return Outcome{}, err
	}
	active := activeRoot(roots)
	if active == nil {
		id, err := m.initialize(ctx, cfg, list.GetResources())
		return Outcome{ActiveRootID: id}, err
	}
	out := Outcome{ActiveRootID: active.root.GetId()}
	reason, err := ca.RotationReason(cfg, active.root)
	if err != nil {
		return out, err
	}
	if reason != "" {
		id, err := m.rotate(ctx, cfg, active, list.GetResources(), reason)
		if err != nil {
			return out, fmt.Errorf("rotate the root (%s): %w", reason, err)
		}
		// The roots changed: the next reconcile, which the change
		// brings, prunes from a fresh list.
		return Outcome{ActiveRootID: id, RotatedOut: active.root.GetId()}, nil
	}
	if wrote, err := m.recordLeafTTL(ctx, cfg, active); err != nil || wrote {
		// The roots changed: the reconcile the change brings prunes.
		return out, err
	}
	out.Pruned, out.NextPrune, err = m.prune(ctx, cfg, roots)
	return out, err
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

// initialize makes the cluster's first root, generated or the supplied
// one, and returns its id. It writes the root with a compare that no root
// was created or changed since the list of roots (at their newest version),
// so that two managers never both make one.
func (m *Manager) initialize(ctx context.Context, cfg *pbca.CAConfig, roots []*pbresource.Resource) (string, error) {
	clusterID, err := core.ClusterID(ctx, m.API)
	if err != nil {
		return "", err
	}
	trustDomain := ca.TrustDomain(clusterID)
	nr, err := m.newRoot(ctx, cfg, trustDomain)
	if err != nil {
		return "", err
	}
	rootRes, err := m.rootResource(nr, trustDomain, cfg, nil, roots)
	if err != nil {
		return "", err
	}
	if err := m.writeRoots(ctx, nr, []*pbresource.Resource{rootRes}, roots); err != nil {
		return "", err
	}
	m.log().Info("made the CA root", "root_id", nr.id, "supplied", nr.supplied, "trust_domain", trustDomain, "not_after", nr.cert.NotAfter)
	return nr.id, nil
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

// storedRoot is a CARoot with the resource it was read from.
type storedRoot struct {
	res  *pbresource.Resource
	root *pbca.CARoot
}

func decodeRoots(list []*pbresource.Resource) ([]storedRoot, error) {
	out := make([]storedRoot, 0, len(list))
	for _, res := range list {
		r, err := resource.DecodeData[*pbca.CARoot](res)
		if err != nil {
			return nil, fmt.Errorf("decode the CA root %s: %w", res.GetId().GetName(), err)
		}
		out = append(out, storedRoot{res: res, root: r})
	}
	return out, nil
}

// activeRoot returns the active root of roots, or nil.
func activeRoot(roots []storedRoot) *storedRoot {
	for i := range roots {
		if roots[i].root.GetActive() {
			return &roots[i]
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
