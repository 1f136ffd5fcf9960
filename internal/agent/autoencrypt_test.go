package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/leaves"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/ca/camodule"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/testcluster"
	"trellis.dev/trellis/internal/testlog"
	"trellis.dev/trellis/internal/tlsutil"
)

// peerSeen is what a server saw of the agent's calls: the URI SAN and
// serial of the client certificate each heartbeat came with.
type peerSeen struct {
	mu    sync.Mutex
	calls []seenCall
}

// seenCall is one call: the server that took it, the client's address
// (one per connection), the method, and the client certificate's URI SAN
// and serial.
type seenCall struct {
	server, addr, method, uri, serial string
}

func (p *peerSeen) record(server string, ctx context.Context, method string) {
	if !strings.Contains(method, "AgentService") && !strings.Contains(method, "CAService/Sign") {
		return
	}
	pr, ok := peer.FromContext(ctx)
	if !ok {
		return
	}
	info, ok := pr.AuthInfo.(credentials.TLSInfo)
	c := seenCall{server: server, addr: pr.Addr.String(), method: method}
	if ok && len(info.State.PeerCertificates) > 0 {
		leaf := info.State.PeerCertificates[0]
		if len(leaf.URIs) > 0 {
			c.uri = leaf.URIs[0].String()
		}
		c.serial = fmt.Sprintf("%x", leaf.SerialNumber)
	}
	p.mu.Lock()
	p.calls = append(p.calls, c)
	p.mu.Unlock()
}

// saw reports whether a server other than except took a call of the agent
// presenting the leaf of uri and serial.
func (p *peerSeen) saw(uri, serial, except string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.calls {
		if strings.Contains(c.method, "AgentService") && c.uri == uri && c.serial == serial && c.server != except {
			return true
		}
	}
	return false
}

// signedOnTheSession reports whether a server took a Sign on a connection
// that also carried the agent's heartbeats presenting uri: the leaf
// cache's calls ride the session's link.
func (p *peerSeen) signedOnTheSession(uri string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	session := map[[2]string]bool{}
	for _, c := range p.calls {
		if strings.Contains(c.method, "AgentService") && c.uri == uri {
			session[[2]string{c.server, c.addr}] = true
		}
	}
	for _, c := range p.calls {
		if strings.Contains(c.method, "CAService/Sign") && session[[2]string{c.server, c.addr}] {
			return true
		}
	}
	return false
}

func (p *peerSeen) options(server string) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			p.record(server, ctx, info.FullMethod)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			p.record(server, ss.Context(), info.FullMethod)
			return h(srv, ss)
		}),
	}
}

// writeTLSFiles writes what `trellis tls ca create` and `trellis tls
// cert create -server` write: the CA, and a server certificate and key.
func writeTLSFiles(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	authority, err := tlsutil.GenerateCA(tlsutil.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srvCert, err := tlsutil.GenerateCert(authority, tlsutil.CertOptions{Kind: tlsutil.KindServer})
	if err != nil {
		t.Fatal(err)
	}
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	for name, data := range map[string][]byte{caFile: authority.CertPEM, certFile: srvCert.CertPEM, keyFile: srvCert.KeyPEM} {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caFile, certFile, keyFile
}

// serversSeen records, for the agent's own calls, the certificate the
// server presented (its chain, as the agent received it).
type serversSeen struct {
	mu     sync.Mutex
	chains [][]*x509.Certificate
}

func (s *serversSeen) options() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			var p peer.Peer
			err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Peer(&p))...)
			s.record(&p)
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err == nil {
				if p, ok := peer.FromContext(cs.Context()); ok {
					s.record(p)
				}
			}
			return cs, err
		}),
	}
}

func (s *serversSeen) record(p *peer.Peer) {
	if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
		s.mu.Lock()
		s.chains = append(s.chains, info.State.PeerCertificates)
		s.mu.Unlock()
	}
}

// connectServerLeaf is the last chain seen that is a server's Connect
// leaf verifying against roots, or nil.
func (s *serversSeen) connectServerLeaf(roots []*x509.Certificate) []*x509.Certificate {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.chains) - 1; i >= 0; i-- {
		if id, err := ca.VerifyPeer(s.chains[i], roots, time.Now()); err == nil {
			if _, ok := id.(ca.ServerID); ok {
				return s.chains[i]
			}
		}
	}
	return nil
}

type tlsServer struct {
	srv  *server.Server
	tls  *tlsutil.Configurator
	stop func()
}

// An agent given only the cluster CA's file and -auto-encrypt joins a
// three-server cluster whose servers hold certificate files of that CA:
// it gets its agent leaf from the Connect CA over server-authenticated
// TLS, and the servers see its heartbeats come with that leaf (the peer
// certificate's URI SAN is the agent's SPIFFE id). After a rotation it
// holds a leaf of the new root, and a server it moves to takes its
// heartbeats presenting that new leaf.
func TestAutoEncrypt(t *testing.T) {
	if testing.Short() {
		t.Skip("forms a three-server Raft cluster")
	}
	caFile, certFile, keyFile := writeTLSFiles(t, t.TempDir())
	ports, err := testcluster.FreePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	seen := &peerSeen{}
	addrs := make([]string, 3)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", ports[i])
	}
	servers := make([]*tlsServer, 3)
	for i := range servers {
		var join []string
		for j, a := range addrs {
			if j != i {
				join = append(join, a)
			}
		}
		tc, err := tlsutil.New(tlsutil.Config{Server: true, CAFile: caFile, CertFile: certFile, KeyFile: keyFile})
		if err != nil {
			t.Fatal(err)
		}
		// After the rotation each server signs itself a leaf of the new
		// root at a random moment of this window: a second, not the
		// default's ten, which the test would wait out.
		modules := server.DefaultModules()
		for k, m := range modules {
			if m.Name() == "ca" {
				modules[k] = camodule.New(camodule.Config{ServerResignWindow: time.Second})
			}
		}
		srv, err := server.New(server.Config{
			TLS: tc, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", ServerAddr: addrs[i], RaftAddr: fmt.Sprintf("127.0.0.1:%d", ports[3+i]),
			Raft:              &server.RaftConfig{DataDir: t.TempDir(), BootstrapExpect: 3, RetryJoin: join},
			PublicGRPCOptions: seen.options(fmt.Sprint(i)),
			Logger:            testlog.Logger(t).With("server", i), ShutdownTimeout: 20 * time.Second,
			Modules: modules,
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Start(ctx) }()
		var once sync.Once
		s := &tlsServer{srv: srv, tls: tc, stop: func() {
			once.Do(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("server %d: %v", i, err)
				}
			})
		}}
		t.Cleanup(s.stop)
		servers[i] = s
	}
	base := "http://" + servers[0].srv.HTTPAddr()
	var first camodule.RootsBody
	eventually(t, "the CA's active root", func() bool {
		first = caRoots(base)
		return first.ActiveRootID != ""
	})

	// What `trellis agent -tls-ca-file ca.pem -auto-encrypt` does.
	caOnly, err := tlsutil.New(tlsutil.Config{CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config(t, "i-1", newProcTable(t))
	for _, s := range servers {
		cfg.Servers = append(cfg.Servers, s.srv.GRPCAddr())
	}
	cfg.TLS, cfg.AutoEncrypt, cfg.ResignWindow = caOnly.OutgoingClientConfig(), true, time.Second
	agentSaw := &serversSeen{}
	cfg.DialOptions = append(cfg.DialOptions, agentSaw.options()...)
	a := startAgent(t, cfg)

	wantID := ca.AgentID{TrustDomain: first.TrustDomain, Datacenter: "dc1", Instance: "i-1"}.String()
	var leaf string
	eventually(t, "a server takes the agent's heartbeats with its agent leaf", func() bool {
		cert := a.Leaves().AgentCertificate()
		if cert == nil {
			return false
		}
		leaf = fmt.Sprintf("%x", cert.Leaf.SerialNumber)
		return a.Server() != "" && seen.saw(wantID, leaf, "")
	})
	// Both sides on Connect certificates: the server the agent joined
	// presented its own Connect leaf (asked for by name, checked against
	// the roots the agent follows), not its certificate file.
	roots := parseRoots(t, first)
	eventually(t, "the agent's calls answered by a server presenting its Connect leaf", func() bool {
		return agentSaw.connectServerLeaf(roots) != nil
	})
	// The CLI, with the cluster CA alone, is served the certificate file
	// it can check.
	cli, err := grpc.NewClient(servers[0].srv.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(caOnly.OutgoingClientConfig())))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var p peer.Peer
	if _, err := pbresource.NewResourceServiceClient(cli).List(context.Background(), &pbresource.ListRequest{Type: ca.RootType, Tenancy: &pbresource.Tenancy{}}, grpc.Peer(&p)); err != nil {
		t.Fatalf("the CLI's call: %v", err)
	}
	if info, ok := p.AuthInfo.(credentials.TLSInfo); !ok || len(info.State.PeerCertificates[0].URIs) != 0 {
		t.Fatalf("the CLI was served %v, want the certificate file", p.AuthInfo)
	}

	// The agent's leaf alone proves its bearer the agent of i-1, who
	// alone writes the status["agent"] of a task placed on i-1: a client
	// presenting it, naming no session, may; the CLI, presenting none,
	// may not.
	agentCert := a.Leaves().AgentCertificate()
	asAgent, err := grpc.NewClient(servers[0].srv.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(
		tlsutil.PresentingLeaf(caOnly.OutgoingClientConfig(), func() *tls.Certificate { return agentCert }))))
	if err != nil {
		t.Fatal(err)
	}
	defer asAgent.Close()
	probe, _ := anypb.New(&pborch.Task{TaskDefinition: "probe:1", Instance: "i-1", StartedBy: "test", DesiredStatus: orchestrator.StatusStopped})
	placed, err := pbresource.NewResourceServiceClient(cli).Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: orchestrator.TaskID("default", "probe"), Data: probe}})
	if err != nil {
		t.Fatal(err)
	}
	report, _ := anypb.New(&pborch.TaskStatus{LastStatus: orchestrator.StatusStopped, StopReason: "never started"})
	write := &pbresource.WriteStatusRequest{Id: placed.GetResource().GetId(), Key: orchestrator.TaskStatusKey, Status: &pbresource.Status{Data: report}}
	if _, err := pbresource.NewResourceServiceClient(cli).WriteStatus(context.Background(), write); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("the CLI writing the agent's key: %v, want PermissionDenied", err)
	}
	if _, err := pbresource.NewResourceServiceClient(asAgent).WriteStatus(context.Background(), write); err != nil {
		t.Fatalf("a client presenting i-1's agent leaf writing the key: %v", err)
	}

	// A rotation: the agent's leaf is signed again, from the new root.
	body, _ := json.Marshal(map[string]any{"config": map[string]any{"rotation": 1}})
	req, _ := http.NewRequest(http.MethodPut, base+"/v1/ca/config", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/ca/config rotation = %s", resp.Status)
	}
	var rotated camodule.RootsBody
	eventually(t, "a new active root", func() bool {
		rotated = caRoots(base)
		return rotated.ActiveRootID != "" && rotated.ActiveRootID != first.ActiveRootID
	})
	var newLeaf string
	eventually(t, "the agent's leaf signed under the new root", func() bool {
		for _, in := range a.Leaves().Leaves() {
			if in.Key == leaves.AgentKey.String() && in.RootID == rotated.ActiveRootID {
				newLeaf = in.Serial
				return true
			}
		}
		return false
	})

	// The agent's leaf was signed again over the session's connection:
	// the agent has one link to the servers.
	eventually(t, "the agent's leaf signed again on the session's connection", func() bool {
		return seen.signedOnTheSession(wantID)
	})

	// Every server signs itself a leaf of the new root (within its
	// window, a second).
	newRoots := parseRoots(t, rotated)
	for i, s := range servers {
		eventually(t, fmt.Sprintf("server %d's leaf of the new root", i), func() bool {
			cert := s.tls.ConnectServerCertificate()
			return cert != nil && bytes.Equal(cert.Leaf.AuthorityKeyId, newRoots[0].SubjectKeyId)
		})
	}

	// The server the agent is on goes away; another takes its heartbeats,
	// over a new connection presenting the new leaf.
	on := a.Server()
	var stopped string
	for i, s := range servers {
		if s.srv.GRPCAddr() == on {
			stopped = fmt.Sprint(i)
			s.stop()
		}
	}
	eventually(t, "another server takes the agent's heartbeats with its new leaf", func() bool {
		return seen.saw(wantID, newLeaf, stopped)
	})
	// On the new connection too, the server presents its Connect leaf,
	// one of the new root.
	eventually(t, "the agent's calls answered by a server presenting a Connect leaf of the new root", func() bool {
		chain := agentSaw.connectServerLeaf(newRoots[:1])
		return chain != nil && bytes.Equal(chain[0].AuthorityKeyId, newRoots[0].SubjectKeyId)
	})
}

// parseRoots are the root certificates of roots, the active one first.
func parseRoots(t *testing.T, roots camodule.RootsBody) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for _, r := range roots.Roots {
		c, err := ca.ParseCerts([]byte(r.RootCert))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c[0])
	}
	return out
}

func caRoots(base string) camodule.RootsBody {
	var body camodule.RootsBody
	resp, err := http.Get(base + "/v1/ca/roots")
	if err != nil {
		return body
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		_ = json.NewDecoder(resp.Body).Decode(&body)
	}
	return body
}

// The leaf cache holds a leaf for the service of each task the agent runs
// (its service: a mesh task's is its mesh block's), signed by the server's
// CA, and drops it once the family's last task is gone. The local API
// lists the leaves, and never a key.
func TestLeafCacheFollowsTheAgentsTasks(t *testing.T) {
	srv, _, a := runningTask(t)
	hasLeaf := func(key string) bool {
		for _, in := range a.Leaves().Leaves() {
			if in.Key == key && in.Serial != "" {
				return true
			}
		}
		return false
	}
	eventually(t, "a leaf for the sleeper family", func() bool { return hasLeaf("default/sleeper") && hasLeaf("agent") })
	// With the session on a server, the cache's calls and its roots watch
	// ride the session's connection, and it holds none of its own.
	eventually(t, "the leaf cache riding the session's link", func() bool { return a.leafServers.Riding() })
	cert, pool, err := a.Leaves().Get(context.Background(), leaves.ServiceKey("default", "sleeper"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("the service leaf does not verify against the cache's roots: %v", err)
	}
	if u := cert.Leaf.URIs[0].String(); !strings.HasSuffix(u, "/ns/default/dc/dc1/svc/sleeper") {
		t.Fatalf("the service leaf names %s", u)
	}
	code, body := controlGet(t, a.Agent, "/v1/agent/leaves")
	if code != http.StatusOK || !strings.Contains(body, `"key":"default/sleeper"`) || strings.Contains(body, "PRIVATE KEY") {
		t.Fatalf("GET /v1/agent/leaves = %d %s", code, body)
	}

	srv.editTask(t, "default", "t1", func(tk *pborch.Task) { tk.DesiredStatus = orchestrator.StatusStopped })
	srv.waitTask(t, "default", "t1", "stops", lastStatus(orchestrator.StatusStopped))
	if _, err := srv.res.Delete(context.Background(), &pbresource.DeleteRequest{Id: orchestrator.TaskID("default", "t1")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the sleeper leaf is dropped", func() bool { return !hasLeaf("default/sleeper") && hasLeaf("agent") })
}
