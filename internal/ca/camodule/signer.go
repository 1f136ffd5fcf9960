package camodule

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/resource"
)

// Signer is the CA's signing service on one server, leader or follower:
// it follows the stored CA (the roots, the sealed signing keys, the
// configuration) in this server's own replicated state, keeps the active
// root's signing key parsed in memory, and signs leaves with it. A
// signature costs no Raft write and no round trip to the leader.
type Signer struct {
	api        resource.API
	datacenter string
	now        func() time.Time
	log        *slog.Logger
	limiter    *Limiter
	metrics    *signMetrics // nil: none

	state atomic.Pointer[signingState]
	// broken is why the stored CA cannot be signed with, when the
	// signer has no state to keep signing with meanwhile.
	broken atomic.Pointer[error]

	// changed is closed and replaced whenever state is (setState), for
	// the server's own leaf to follow the signing state.
	changedMu sync.Mutex
	changed   chan struct{}

	mu   sync.Mutex // guards view and synced
	view caView
	// synced: which of the three followed types has delivered its
	// snapshot. Nothing is built before all three have.
	synced map[string]bool
}

// SignerConfig configures a Signer.
type SignerConfig struct {
	API        resource.API
	Datacenter string           // the server's: leaves are signed for it only
	Now        func() time.Time // time.Now when nil
	Logger     *slog.Logger     // discards when nil
}

// NewSigner returns a signer; Start runs its follow of the stored CA, and
// it signs nothing before that has found the active root.
func NewSigner(cfg SignerConfig) *Signer {
	s := &Signer{
		api: cfg.API, datacenter: cfg.Datacenter, now: cfg.Now, log: cfg.Logger,
		limiter: NewLimiter(Limits{}), synced: map[string]bool{},
		view:    caView{keys: map[string]*pbresource.Resource{}},
		changed: make(chan struct{}),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}

// Leaf is a signed leaf certificate.
type Leaf struct {
	CertPEM string
	// ChainPEM is what a TLS peer sends after the leaf (PEM); empty when
	// the root signed the leaf and no rotation put a cross-signed
	// certificate between them.
	ChainPEM string
	// Serial is the leaf's serial number in lower-case hex.
	Serial   string
	NotAfter time.Time
	ID       ca.Identity
}

// Sign signs the PEM certificate signing request csrPEM: it parses it,
// checks it against this CA's trust domain and this server's datacenter,
// and signs a leaf of the CAConfig's leaf_ttl. Refusals are a
// *ca.Refusal (bad input), a *RateLimitedError (over the limit), or
// Unavailable (no active root yet, or a signing key whose leaves do not
// verify: selfcheck.go).
func (s *Signer) Sign(ctx context.Context, csrPEM []byte) (Leaf, error) {
	st, err := s.awaitState(ctx)
	if err != nil {
		return Leaf{}, err
	}
	if err := st.selfCheck.refusal(st.rootID); err != nil {
		return Leaf{}, err
	}
	now := s.now()
	release, err := s.limiter.Acquire(now)
	if err != nil {
		var rl *RateLimitedError
		if errors.As(err, &rl) {
			s.metrics.rateLimited(rl.Limit)
		}
		return Leaf{}, err
	}
	defer release()
	csr, err := ca.ParseCSR(csrPEM)
	if err != nil {
		s.metrics.refused(err)
		return Leaf{}, err
	}
	id, err := ca.CheckCSR(csr, ca.CSRPolicy{TrustDomain: st.trustDomain, Datacenter: s.datacenter})
	if err != nil {
		s.metrics.refused(err)
		return Leaf{}, err
	}
	leaf, err := st.issuer.Issue(csr, id, st.leafTTL, now)
	if err != nil {
		// The CSR passed every check: what is left is the signer's
		// fault (an expired signing certificate), not the caller's.
		return Leaf{}, status.Errorf(codes.Internal, "sign the leaf of %s: %v", id, err)
	}
	if err := s.checkLeaf(st, leaf); err != nil {
		return Leaf{}, err
	}
	s.metrics.signed()
	return Leaf{
		CertPEM:  string(leaf.PEM()),
		ChainPEM: st.chainPEM,
		Serial:   leaf.Serial.Text(16),
		NotAfter: leaf.NotAfter,
		ID:       id,
	}, nil
}

// stateWait bounds how long a request waits for a signer that has no
// state yet: the root shows in the store (GET /v1/ca/roots) a moment
// before this server's signer has followed it, and its key, in; a
// request in that moment waits instead of failing.
const stateWait = 3 * time.Second

// awaitState is what to sign with: the state, once the signer has one
// (waiting up to stateWait for the first), or Unavailable saying why
// there is none.
func (s *Signer) awaitState(ctx context.Context) (*signingState, error) {
	var timeout <-chan time.Time
	for {
		changed := s.stateChanged()
		if st := s.state.Load(); st != nil {
			return st, nil
		}
		if timeout == nil {
			t := time.NewTimer(stateWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-changed:
			continue
		case <-ctx.Done():
		case <-timeout:
		}
		msg := errNoActiveRoot.Error()
		if b := s.broken.Load(); b != nil {
			msg = "the CA cannot sign on this server: " + (*b).Error()
		}
		return nil, status.Error(codes.Unavailable, msg)
	}
}

// checkLeaf verifies leaf when its key's self-check is due, and on a
// failure stops the key from signing on this server (selfcheck.go).
func (s *Signer) checkLeaf(st *signingState, leaf ca.IssuedLeaf) error {
	if !st.selfCheck.due() {
		return nil
	}
	if _, err := st.issuer.Check(leaf); err != nil {
		st.selfCheck.fail(err)
		s.metrics.selfChecked(false)
		s.log.Error("CA signer: a leaf signed with the active root's key does not verify; this server signs no more with that key",
			"root_id", st.rootID, "err", err)
		return st.selfCheck.refusal(st.rootID)
	}
	st.selfCheck.proven.Store(true)
	s.metrics.selfChecked(true)
	return nil
}

// TrustDomain is the active root's trust domain; "" before there is one.
func (s *Signer) TrustDomain() string {
	if st := s.state.Load(); st != nil {
		return st.trustDomain
	}
	return ""
}

// ActiveRootID is the id of the root this server signs under; "" before
// there is one.
func (s *Signer) ActiveRootID() string {
	if st := s.state.Load(); st != nil {
		return st.rootID
	}
	return ""
}

// Datacenter is the datacenter this server signs for.
func (s *Signer) Datacenter() string { return s.datacenter }

// The kinds of the followed types, keys of Signer.synced.
var followed = []*pbresource.Type{ca.RootType, ca.SigningKeyType, ca.ConfigType}

// Start follows the stored CA until ctx ends: one watch per type, each
// opened again with backoff when it fails (a follower that has not
// caught up with the leader is refused a watch for a while). Meanwhile
// the signer keeps signing with what it last built.
func (s *Signer) Start(ctx context.Context) error {
	// The signing keys are sealed: only the server's own code reads them.
	ctx = resource.FromOperations(ctx)
	var wg sync.WaitGroup
	errs := make([]error, len(followed))
	for i, typ := range followed {
		set := resource.NewWatchedSet(resource.WatchedSetConfig{
			Source: s.api,
			Type:   typ,
			Changed: func(set map[string]*pbresource.Resource) error {
				s.observe(typ, set)
				return nil
			},
			Retry:  retryPolicy,
			Rand:   rand.Float64,
			Logger: s.log,
		})
		wg.Go(func() { errs[i] = set.Start(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// retryPolicy paces the watches opened again after a failure.
var retryPolicy = backoff.Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second}

// observe takes the current set of one type and, once every type has
// delivered its snapshot, builds what to sign with. A stored CA that
// cannot sign (the active root's key not replicated yet, a key that does
// not match) leaves the state in use as it is: leaves of the previous
// root stay valid until it is pruned.
func (s *Signer) observe(typ *pbresource.Type, set map[string]*pbresource.Resource) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch typ.GetKind() {
	case ca.RootType.GetKind():
		s.view.roots = make([]*pbresource.Resource, 0, len(set))
		for _, r := range set {
			s.view.roots = append(s.view.roots, r)
		}
	case ca.SigningKeyType.GetKind():
		s.view.keys = make(map[string]*pbresource.Resource, len(set))
		for n, r := range set {
			s.view.keys[n] = r
		}
	case ca.ConfigType.GetKind():
		s.view.config = set[ca.ConfigName]
	}
	s.synced[typ.GetKind()] = true
	if len(s.synced) < len(followed) {
		return
	}
	prev := s.state.Load()
	st, err := buildSigningState(s.view, prev)
	if err != nil {
		switch {
		case errors.Is(err, errNoActiveRoot):
			return
		case errors.Is(err, errNoKeyYet):
			// Its watch delivers it in a moment.
			s.log.Debug("CA signer: waiting for the active root's signing key", "err", err)
		case prev != nil:
			s.log.Warn("CA signer: cannot sign with the stored CA; signing on under the root it had", "root_id", prev.rootID, "err", err)
		default:
			s.log.Warn("CA signer: cannot sign with the stored CA", "err", err)
		}
		if prev == nil {
			s.broken.Store(&err)
		}
		return
	}
	s.broken.Store(nil)
	s.limiter.SetLimits(st.limits)
	if prev == nil || prev.rootID != st.rootID {
		s.log.Info("CA signer: signing under root", "root_id", st.rootID, "trust_domain", st.trustDomain, "datacenter", s.datacenter)
	}
	s.setState(st)
}

// setState makes st what the signer signs with and wakes whoever follows
// it (stateChanged).
func (s *Signer) setState(st *signingState) {
	s.state.Store(st)
	s.changedMu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.changedMu.Unlock()
}

// stateChanged is closed at the next setState: read the state after
// taking it, and wait on it for the next.
func (s *Signer) stateChanged() <-chan struct{} {
	s.changedMu.Lock()
	defer s.changedMu.Unlock()
	return s.changed
}
