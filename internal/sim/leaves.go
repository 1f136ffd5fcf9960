package sim

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pbca "trellis.dev/trellis/api/ca/v1"
	"trellis.dev/trellis/internal/agent/leaves"
)

// The fleet's leaves (Config.CALeaves): every simulated instance holds
// a leaf cache of the real leaves package, with its agent leaf (and,
// with Config.CAServiceLeaf, one service leaf), signed through the real
// CAService.Sign. Two things are shared in this process that a real
// fleet's agents each have alone:
//
//   - one watch of the CA's roots, whose every change is handed to every
//     cache (a real agent opens its own watch; 5,000 watches from one
//     process would measure the process, not the CA);
//   - one gRPC connection per server, each cache signing over the
//     connection of the server its instance starts from (connSigner:
//     unlike leaves.Servers, which a real agent has to itself, it never
//     closes the connection on a failure, which would cancel the
//     signatures of every other cache under way on it; gRPC reconnects by
//     itself). The roots watch has a connection of its own.
//
// What the servers see of a rotation is thus what a fleet's would: each
// cache draws its own re-signing time in the window and signs on its own.

// leafFleet is the fleet's leaf caches.
type leafFleet struct {
	watcher *leaves.Servers
	conns   []*grpc.ClientConn // one per server, shared by the caches' signers
	log     *slog.Logger

	mu      sync.Mutex
	roots   leaves.Roots
	started []*leaves.Cache // those whose Run has begun, in instance order
	caches  []*leaves.Cache // every instance's, in instance order
}

func newLeafFleet(cfg Config) (*leafFleet, error) {
	lf := &leafFleet{log: cfg.Logger}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, leaves.Token(cfg.Token)...)
	lf.watcher = leaves.NewServers(cfg.Servers, cfg.Logger, opts...)
	for _, addr := range cfg.Servers {
		cc, err := grpc.NewClient(addr, opts...)
		if err != nil {
			lf.close()
			return nil, err
		}
		lf.conns = append(lf.conns, cc)
	}
	var services []leaves.Key
	if cfg.CAServiceLeaf {
		services = []leaves.Key{leaves.ServiceKey("sim", "sim-service")}
	}
	for i := 1; i <= cfg.Instances; i++ {
		c, err := leaves.New(leaves.Config{
			Signer:       connSigner{lf.conns[(i-1)%len(lf.conns)]},
			Datacenter:   cfg.Datacenter,
			Instance:     instanceName(cfg, i),
			ResignWindow: cfg.CAResignWindow,
			Logger:       cfg.Logger,
		})
		if err == nil {
			err = c.SetServices(services)
		}
		if err != nil {
			lf.close()
			return nil, err
		}
		lf.caches = append(lf.caches, c)
	}
	return lf, nil
}

// watch follows the roots until ctx ends, handing each change to every
// cache started.
func (lf *leafFleet) watch(ctx context.Context) {
	lf.watcher.WatchRoots(ctx, func(r leaves.Roots) {
		lf.mu.Lock()
		defer lf.mu.Unlock()
		lf.roots = r
		for _, c := range lf.started {
			c.SetRoots(r)
		}
	})
}

// start runs instance i's cache (from 1) until ctx ends.
func (lf *leafFleet) start(ctx context.Context, i int) {
	c := lf.caches[i-1]
	lf.mu.Lock()
	lf.started = append(lf.started, c)
	if lf.roots.ActiveID != "" {
		c.SetRoots(lf.roots) // under the lock: never after a newer SetRoots of watch
	}
	lf.mu.Unlock()
	go c.Run(ctx)
}

func (lf *leafFleet) close() {
	lf.watcher.Close()
	for _, cc := range lf.conns {
		cc.Close()
	}
}

// connSigner signs over a connection shared by many caches: what
// leaves.Servers.Sign does, without ever closing the connection.
type connSigner struct{ cc *grpc.ClientConn }

func (s connSigner) Sign(ctx context.Context, csrPEM string) (certPEM, chainPEM string, err error) {
	var trailer metadata.MD
	resp, err := pbca.NewCAServiceClient(s.cc).Sign(ctx, &pbca.SignRequest{CsrPem: csrPEM}, grpc.Trailer(&trailer))
	if status.Code(err) == codes.ResourceExhausted {
		wait := time.Second
		if v := trailer.Get(leaves.RetryAfterKey); len(v) > 0 {
			if n, perr := strconv.Atoi(v[0]); perr == nil && n >= 0 {
				wait = time.Duration(n) * time.Second
			}
		}
		return "", "", &leaves.RateLimitedError{RetryAfter: wait, Err: err}
	}
	if err != nil {
		return "", "", err
	}
	return resp.GetCertPem(), resp.GetChainPem(), nil
}

// LeafStatus is what the fleet's leaf caches hold now.
type LeafStatus struct {
	// ActiveRootID is the active root the servers name now.
	ActiveRootID string `json:"active_root_id"`
	// Instances is how many instances have a cache running.
	Instances int `json:"instances"`
	// Signed is how many of them hold every leaf.
	Signed int `json:"signed"`
	// OfActiveRoot is how many of them hold every leaf signed under the
	// active root.
	OfActiveRoot int `json:"of_active_root"`
	// Failing is how many leaves' last attempt to sign failed.
	Failing int `json:"failing"`
}

// Status counts the caches' leaves.
func (lf *leafFleet) Status() LeafStatus {
	lf.mu.Lock()
	started, active := lf.started, lf.roots.ActiveID
	lf.mu.Unlock()
	st := LeafStatus{ActiveRootID: active, Instances: len(started)}
	for _, c := range started {
		signed, ofActive := true, active != ""
		for _, in := range c.Leaves() {
			if in.Serial == "" {
				signed = false
			}
			if in.Serial == "" || in.RootID != active {
				ofActive = false
			}
			if in.Failures > 0 {
				st.Failing++
			}
		}
		if signed {
			st.Signed++
		}
		if ofActive {
			st.OfActiveRoot++
		}
	}
	return st
}

// LeafSample is one instance's agent leaf as its peers get it: the leaf
// and its chain, PEM (never its key).
type LeafSample struct {
	Instance string `json:"instance"`
	ChainPEM string `json:"chain_pem"`
}

// sample returns the agent leaf of every every-th instance that holds one.
func (lf *leafFleet) sample(every int) []LeafSample {
	lf.mu.Lock()
	started := lf.started
	lf.mu.Unlock()
	var out []LeafSample
	for i := 0; i < len(started); i += every {
		cert := started[i].AgentCertificate()
		if cert == nil {
			continue
		}
		var buf []byte
		for _, der := range cert.Certificate {
			buf = append(buf, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
		}
		out = append(out, LeafSample{Instance: cert.Leaf.URIs[0].String(), ChainPEM: string(buf)})
	}
	return out
}

// LeavesHandler serves the fleet's leaves for a benchmark to follow:
// GET /v1/sim/leaves is a LeafStatus, GET /v1/sim/leaves/sample?every=N
// the agent leaves (LeafSample, never a key) of every N-th instance. It
// answers 404 when the fleet holds no leaves (Config.CALeaves).
func (f *Fleet) LeavesHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sim/leaves", func(w http.ResponseWriter, _ *http.Request) {
		if f.leaves == nil {
			http.Error(w, "this fleet holds no leaves (-ca-leaves)", http.StatusNotFound)
			return
		}
		writeJSON(w, f.leaves.Status())
	})
	mux.HandleFunc("GET /v1/sim/leaves/sample", func(w http.ResponseWriter, r *http.Request) {
		if f.leaves == nil {
			http.Error(w, "this fleet holds no leaves (-ca-leaves)", http.StatusNotFound)
			return
		}
		every := 1
		if v := r.URL.Query().Get("every"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				http.Error(w, "every: "+strconv.Quote(v)+" is not a whole number of at least 1", http.StatusBadRequest)
				return
			}
			every = n
		}
		writeJSON(w, f.leaves.sample(every))
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
