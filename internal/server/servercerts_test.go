package server_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"

	pbcore "trellis.dev/trellis/api/core/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/ca/camodule"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/tlsutil"
)

// links scrapes trellis_tls_server_links of srv: its live server-port
// links by the certificate the peer presented.
func links(t *testing.T, srv *server.Server) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	mf := scrape(t, "http://"+srv.HTTPAddr()+"/v1/metrics")["trellis_tls_server_links"]
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "peer_cert" {
				out[l.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// onConnect reports whether every live link of every server runs on
// Connect leaves: each end saw the other present one, and none is on a
// certificate file or still in its handshake.
func onConnect(t *testing.T, servers []*server.Server) (bool, string) {
	t.Helper()
	var seen []map[string]float64
	ok := true
	for _, s := range servers {
		l := links(t, s)
		seen = append(seen, l)
		if l[tlsutil.PeerConnect] == 0 || l[tlsutil.PeerClusterCA] != 0 || l[tlsutil.LinkHandshaking] != 0 {
			ok = false
		}
	}
	return ok, fmt.Sprint(seen)
}

func caRootsOf(t *testing.T, srv *server.Server) camodule.RootsBody {
	t.Helper()
	var body camodule.RootsBody
	resp, err := http.Get("http://" + srv.HTTPAddr() + "/v1/ca/roots")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
	}
	return body
}

// signedUnder reports whether tc's Connect leaf was signed by the root
// whose certificate is rootPEM, and verifies with its chain against it.
func signedUnder(t *testing.T, tc *tlsutil.Configurator, rootPEM string) bool {
	t.Helper()
	cert := tc.ConnectServerCertificate()
	if cert == nil {
		return false
	}
	roots, err := ca.ParseCerts([]byte(rootPEM))
	if err != nil {
		t.Fatal(err)
	}
	var chain []*x509.Certificate
	for _, der := range cert.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		chain = append(chain, c)
	}
	id, err := ca.VerifyPeer(chain, roots, time.Now())
	if err != nil {
		return false
	}
	_, isServer := id.(ca.ServerID)
	return isServer && bytes.Equal(chain[0].AuthorityKeyId, roots[0].SubjectKeyId)
}

// writeThrough writes a namespace through srv's public gRPC port (a
// follower forwards it to the leader on the server port) and waits until
// every server of want has it.
func writeThrough(t *testing.T, srv *server.Server, name string, b *tlsutil.DevBundle, want []*server.Server) {
	t.Helper()
	data, err := anypb.New(&pbcore.Namespace{})
	if err != nil {
		t.Fatal(err)
	}
	c := pbresource.NewResourceServiceClient(dialTLS(t, srv.GRPCAddr(), b))
	eventually(t, 30*time.Second, "the write of "+name, func() bool {
		_, err := c.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: core.NamespaceID(name), Data: data}})
		return err == nil
	})
	for _, s := range want {
		rc := pbresource.NewResourceServiceClient(dialTLS(t, s.GRPCAddr(), b))
		eventually(t, 30*time.Second, name+" replicated to "+s.RaftAddr(), func() bool {
			_, err := rc.Read(context.Background(), &pbresource.ReadRequest{Id: core.NamespaceID(name)})
			return err == nil
		})
	}
}

// A three-server cluster that formed over its certificate files moves
// every server-port link (Raft and the server RPCs, both ends) to the
// servers' own Connect CA leaves once the CA is up; it keeps working, on
// Connect leaves, across a rotation of the CA's root and a leader
// failover.
func TestServerLinksMoveToConnectLeaves(t *testing.T) {
	if testing.Short() {
		t.Skip("forms a three-server Raft cluster")
	}
	b, err := tlsutil.NewDevBundle("", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	tcs := make([]*tlsutil.Configurator, 3)
	servers, stops := raftClusterStops(t, 0, func(i int) *tlsutil.Configurator {
		c, err := tlsutil.NewFromBundle(b)
		if err != nil {
			t.Fatal(err)
		}
		tcs[i] = c
		return c
	}, func(c *server.Config) {
		// The server RPCs' links move to Connect leaves when the gRPC
		// server ends them, at this age.
		c.ServerLinkMaxAge = 2 * time.Second
		// After the rotation each server signs itself a leaf of the new
		// root at a random moment of this window: a second, not the
		// default's ten, which the test would wait out.
		c.Modules = server.DefaultModules()
		for i, m := range c.Modules {
			if m.Name() == "ca" {
				c.Modules[i] = camodule.New(camodule.Config{ServerResignWindow: time.Second})
			}
		}
	})
	leader := leaderOf(t, servers)
	var roots camodule.RootsBody
	eventually(t, 60*time.Second, "the CA's active root", func() bool {
		roots = caRootsOf(t, leader)
		return roots.ActiveRootID != ""
	})
	for i, tc := range tcs {
		eventually(t, 60*time.Second, fmt.Sprintf("server %d's own leaf", i), func() bool { return signedUnder(t, tc, roots.Roots[0].RootCert) })
	}
	allOnConnect(t, servers, "every link on Connect leaves")
	var follower *server.Server
	for _, s := range servers {
		if s != leader {
			follower = s
		}
	}
	writeThrough(t, follower, "on-connect", b, servers)
	allOnConnect(t, servers, "every link on Connect leaves after a forwarded write")

	// A rotation: each server signs itself a leaf of the new root; the
	// cluster goes on over its links, on Connect leaves.
	body, _ := json.Marshal(map[string]any{"config": map[string]any{"rotation": 1}})
	req, _ := http.NewRequest(http.MethodPut, "http://"+leader.HTTPAddr()+"/v1/ca/config", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/ca/config rotation = %s", resp.Status)
	}
	var rotated camodule.RootsBody
	eventually(t, 60*time.Second, "a new active root", func() bool {
		rotated = caRootsOf(t, leader)
		return rotated.ActiveRootID != "" && rotated.ActiveRootID != roots.ActiveRootID
	})
	for i, tc := range tcs {
		// Within the re-signing window (a second).
		eventually(t, 60*time.Second, fmt.Sprintf("server %d's leaf of the new root", i), func() bool { return signedUnder(t, tc, rotated.Roots[0].RootCert) })
	}
	writeThrough(t, follower, "after-rotation", b, servers)
	allOnConnect(t, servers, "every link on Connect leaves after the rotation")

	// The leader fails: the other two elect one over Connect leaves (new
	// links, of the new root's leaves), and writes go on.
	var rest []*server.Server
	for i, s := range servers {
		if s == leader {
			stops[i]()
		} else {
			rest = append(rest, s)
		}
	}
	newLeader := leaderOf(t, rest)
	for _, s := range rest {
		if s != newLeader {
			follower = s
		}
	}
	writeThrough(t, follower, "after-failover", b, rest)
	allOnConnect(t, rest, "the remaining links on Connect leaves")
}

// allOnConnect waits until every live link of servers runs on Connect
// leaves (new links are opened all the time: one may be in its
// handshake at any moment).
func allOnConnect(t *testing.T, servers []*server.Server, what string) {
	t.Helper()
	var last string
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, l := onConnect(t, servers)
		if ok {
			t.Logf("%s: %s", what, l)
			return
		}
		last = l
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
