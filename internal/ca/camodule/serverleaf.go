package camodule

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"log/slog"
	mrand "math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
)

// DefaultServerResignWindow spreads the re-signing of the servers' own
// leaves after a rotation (Config.ServerResignWindow). A cluster has a
// handful of servers, each signing locally, so the window is short; it
// is there so that they do not all swap certificates in one moment.
const DefaultServerResignWindow = 10 * time.Second

// minServerRenewal is the shortest wait between two signatures of the
// server's leaf under one root.
const minServerRenewal = time.Minute

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// serverLeaf keeps this server's own leaf of the Connect CA: a leaf of
// its server identity (spiffe://<td>/server/dc/<dc>/id/<server>), which
// it signs itself with the signing key the Signer holds, with no RPC and
// no CSR. It makes one as soon as the Signer can sign (an active root, or
// a secondary's intermediate), renews it at ca.LeafRenewAt (60 % to 90 %
// of its life), signs it again within the window after the active root or
// its signing certificate changes (signingID), and hands each to the
// server's TLS. The key is made here and
// stays in memory.
type serverLeaf struct {
	signer *Signer
	// id names the server in its SPIFFE id: its Raft node id.
	id     string
	tls    module.ServerCerts
	window time.Duration
	rand   func() float64
	log    *slog.Logger

	current atomic.Pointer[tls.Certificate]
}

// Start keeps the leaf until ctx ends.
func (m *serverLeaf) Start(ctx context.Context) error {
	var sched ca.LeafSchedule
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		changed := m.signer.stateChanged()
		st := m.signer.state.Load()
		var fire <-chan time.Time
		if st != nil {
			now := m.signer.now()
			sched = ca.OnRootChange(sched, signingID(st), now, m.window, m.rand())
			if ca.SignDue(sched, now) {
				sched = m.sign(st, sched, now)
				continue
			}
			timer.Reset(ca.NextSignAt(sched).Sub(now))
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			timer.Stop()
		case <-fire:
		}
	}
}

// signingID names what signs the server's leaf: the active root and the
// key of the signing certificate. A secondary's intermediate renewed
// under the same root changes it, so the leaf is signed again within the
// window: the server ports take a server leaf only from a CA their
// datacenter signs with now (tlsutil's SetConnectRoots), and a leaf of
// the intermediate before would be refused by a peer that has the new one.
func signingID(st *signingState) string {
	return st.rootID + "/" + hex.EncodeToString(st.signer.Cert.SubjectKeyId)
}

// sign makes a key and signs the server's leaf for it under st, hands
// it to the server's TLS, and returns the leaf's new schedule; on a
// failure, the schedule of a retry.
func (m *serverLeaf) sign(st *signingState, sched ca.LeafSchedule, now time.Time) ca.LeafSchedule {
	id := ca.ServerID{TrustDomain: st.trustDomain, Datacenter: m.signer.datacenter, Server: m.id}
	cert, err := m.make(st, id, now)
	if err != nil {
		sched = ca.SignFailed(sched, now, 0, m.rand())
		m.log.Warn("cannot sign this server's own leaf; retrying", "id", id.String(), "retry_at", sched.RetryAt, "err", err)
		return sched
	}
	m.current.Store(cert)
	m.tls.SetConnectServerCertificate(cert)
	sched = ca.LeafSigned(cert.Leaf.NotBefore, cert.Leaf.NotAfter, signingID(st), m.rand())
	// A leaf cut short by its signer's expiry (a root or intermediate
	// near its end) has little life to renew within: never sooner than
	// minServerRenewal from now, or the last minutes would sign in a loop.
	sched.RenewAt = later(sched.RenewAt, now.Add(minServerRenewal))
	m.log.Info("signed this server's own leaf", "id", id.String(), "serial", cert.Leaf.SerialNumber.Text(16),
		"not_after", cert.Leaf.NotAfter.UTC(), "renew_at", sched.RenewAt.UTC(), "root_id", st.rootID)
	return sched
}

func (m *serverLeaf) make(st *signingState, id ca.ServerID, now time.Time) (*tls.Certificate, error) {
	key, err := ca.GenerateKey(ca.DefaultKeyType)
	if err != nil {
		return nil, err
	}
	leaf, err := ca.SignServerLeaf(key.Public(), id, m.tls.ServerNames(), st.signer, st.leafTTL, now)
	if err != nil {
		return nil, err
	}
	cert := &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
	for _, c := range st.signer.Chain {
		cert.Certificate = append(cert.Certificate, c.Raw)
	}
	return cert, nil
}

// newServerLeaf returns the maker of the server's own leaf, or nil when
// the server has no TLS to hand it to (or takes its certificates from
// files alone). A server id that cannot be a SPIFFE id's segment makes
// none, with a warning: the server keeps its certificate file.
func newServerLeaf(d module.Deps, signer *Signer, window time.Duration, log *slog.Logger) *serverLeaf {
	if d.ServerCerts == nil {
		return nil
	}
	if !resource.IsDNSLabel(d.Cluster.ServerID) {
		log.Warn("this server's id cannot name a server identity (a lower-case DNS label); it presents its certificate file only", "server_id", d.Cluster.ServerID)
		return nil
	}
	if window <= 0 {
		window = DefaultServerResignWindow
	}
	return &serverLeaf{
		signer: signer, id: d.Cluster.ServerID, tls: d.ServerCerts, window: window,
		rand: mrand.Float64, log: log.With("component", "ca-server-leaf"),
	}
}

var serverLeafExpiryDesc = prometheus.NewDesc("trellis_ca_server_cert_expiry_seconds",
	"Seconds until this server's own leaf of the Connect CA, which it presents to other servers and to agents, expires (absent before it has one).", nil, nil)

// serverLeafCollector reports the expiry of the server's leaf at each
// scrape.
type serverLeafCollector struct{ m *serverLeaf }

func (c serverLeafCollector) Describe(ch chan<- *prometheus.Desc) { ch <- serverLeafExpiryDesc }

func (c serverLeafCollector) Collect(ch chan<- prometheus.Metric) {
	cert := c.m.current.Load()
	if cert == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(serverLeafExpiryDesc, prometheus.GaugeValue, secondsUntil(cert.Leaf.NotAfter, c.m.signer.now()))
}
