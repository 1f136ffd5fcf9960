package sim_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/ca/camodule"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/sim"
	"trellis.dev/trellis/internal/testlog"
)

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode
}

// verifySample checks every sampled agent leaf as a TLS peer would
// against roots alone, and that it names its instance's agent id.
func verifySample(t *testing.T, samples []sim.LeafSample, roots []*x509.Certificate, td string) {
	t.Helper()
	for _, s := range samples {
		chain, err := ca.ParseCerts([]byte(s.ChainPEM))
		if err != nil {
			t.Fatalf("%s: %v", s.Instance, err)
		}
		id, err := ca.VerifyPeer(chain, roots, time.Now())
		if err != nil {
			t.Fatalf("%s: the leaf does not verify: %v", s.Instance, err)
		}
		if id.String() != s.Instance || !bytes.HasPrefix([]byte(s.Instance), []byte("spiffe://"+td+"/agent/client/dc/dc1/id/sim-")) {
			t.Fatalf("sampled %s, whose leaf names %s", s.Instance, id)
		}
	}
}

// A fleet with -ca-leaves holds an agent leaf and a service leaf per
// instance, signed by a real server, and after a rotation holds leaves of
// the new root only, within the window; its handler counts and samples
// them.
func TestFleetLeavesFollowARotation(t *testing.T) {
	srv, err := server.New(server.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702", Logger: testlog.Logger(t), ShutdownTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-srvDone
	})
	base := "http://" + srv.HTTPAddr()

	if _, err := sim.New(sim.Config{Servers: []string{srv.GRPCAddr()}, Instances: 1, CAServiceLeaf: true, DataDir: t.TempDir()}); err == nil {
		t.Fatal("-ca-service-leaf without -ca-leaves was taken")
	}

	const n = 12
	fleet, err := sim.New(sim.Config{Servers: []string{srv.GRPCAddr()}, Instances: n, StartRate: 1000,
		CALeaves: true, CAServiceLeaf: true, CAResignWindow: 2 * time.Second, Logger: testlog.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	status := httptest.NewServer(fleet.LeavesHandler())
	defer status.Close()
	fleetDone := make(chan error, 1)
	go func() { fleetDone <- fleet.Run(ctx, nil) }()

	var st sim.LeafStatus
	eventually(t, "every instance holds its leaves", func() bool {
		getJSON(t, status.URL+"/v1/sim/leaves", &st)
		return st.Instances == n && st.Signed == n && st.OfActiveRoot == n
	})
	first := st.ActiveRootID

	var rootsBody camodule.RootsBody
	getJSON(t, base+"/v1/ca/roots", &rootsBody)
	oldRoots, err := ca.ParseCerts([]byte(rootsBody.Roots[0].RootCert))
	if err != nil {
		t.Fatal(err)
	}
	var samples []sim.LeafSample
	getJSON(t, status.URL+"/v1/sim/leaves/sample?every=3", &samples)
	if len(samples) != n/3 {
		t.Fatalf("every=3 of %d sampled %d leaves", n, len(samples))
	}
	verifySample(t, samples, oldRoots, rootsBody.TrustDomain)

	// The rotation lowers the server's limit too: 24 leaves re-signed
	// within 2 s, at most 4 a second plus a second's burst, so some are
	// refused with a retry-after, and the caches still get there.
	body, _ := json.Marshal(map[string]any{"config": map[string]any{"rotation": 1, "csr_max_per_second": 4}})
	req, _ := http.NewRequest(http.MethodPut, base+"/v1/ca/config", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/ca/config rotation = %s", resp.Status)
	}
	eventually(t, "every instance holds leaves of the new root", func() bool {
		getJSON(t, status.URL+"/v1/sim/leaves", &st)
		return st.ActiveRootID != first && st.ActiveRootID != "" && st.OfActiveRoot == n
	})
	if limited := rateLimited(t, base); limited == 0 {
		t.Fatalf("24 leaves re-signed within 2 s at 4 a second, and no request was refused over the limit")
	}
	getJSON(t, base+"/v1/ca/roots", &rootsBody)
	if rootsBody.ActiveRootID != st.ActiveRootID {
		t.Fatalf("the fleet names %s active, the server %s", st.ActiveRootID, rootsBody.ActiveRootID)
	}
	newRoots, err := ca.ParseCerts([]byte(rootsBody.Roots[0].RootCert)) // the active one first
	if err != nil {
		t.Fatal(err)
	}
	getJSON(t, status.URL+"/v1/sim/leaves/sample?every=1", &samples)
	if len(samples) != n {
		t.Fatalf("every=1 of %d sampled %d leaves", n, len(samples))
	}
	verifySample(t, samples, newRoots, rootsBody.TrustDomain)
	// Through the cross-signed intermediate, the old root alone accepts
	// them too.
	verifySample(t, samples, oldRoots, rootsBody.TrustDomain)

	if code := getJSON(t, status.URL+"/v1/sim/leaves/sample?every=0", &samples); code != http.StatusBadRequest {
		t.Fatalf("every=0 answered %d, want 400", code)
	}
	cancel()
	if err := <-fleetDone; err != nil {
		t.Fatalf("fleet: %v", err)
	}
}

// rateLimited is the server's count of signing requests refused over its
// limit.
func rateLimited(t *testing.T, base string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/v1/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	total := 0.0
	for _, line := range strings.Split(string(out), "\n") {
		if name, v, ok := strings.Cut(line, " "); ok && strings.HasPrefix(name, "trellis_ca_sign_rate_limited_total") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			total += f
		}
	}
	return total
}

// A fleet without leaves says so rather than counting none.
func TestFleetWithoutLeavesAnswers404(t *testing.T) {
	fleet, err := sim.New(sim.Config{Servers: []string{"127.0.0.1:1"}, Instances: 1, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	status := httptest.NewServer(fleet.LeavesHandler())
	defer status.Close()
	for _, path := range []string{"/v1/sim/leaves", "/v1/sim/leaves/sample"} {
		resp, err := http.Get(status.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s = %s, want 404", path, resp.Status)
		}
	}
}
