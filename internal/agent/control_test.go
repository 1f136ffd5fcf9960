package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"trellis.dev/trellis/internal/agent/tasks"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/tlsutil"
)

// controlGet GETs path on the agent's control socket.
func controlGet(t testing.TB, a *Agent, path string) (int, string) {
	t.Helper()
	hc, base, err := Control{Socket: a.ControlSocket()}.client()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestControlSocket(t *testing.T) {
	srv := startServer(t)
	cfg := config(t, "i-1", newProcTable(t), srv)
	a := startAgent(t, cfg)
	if want := filepath.Join(cfg.DataDir, ControlSocketName); a.ControlSocket() != want {
		t.Fatalf("control socket at %s, want %s", a.ControlSocket(), want)
	}
	fi, err := os.Lstat(a.ControlSocket())
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 || int(st.Uid) != os.Getuid() {
		t.Errorf("control socket: mode %v, owner %d; want a socket, 0600, owned by %d", fi.Mode(), st.Uid, os.Getuid())
	}
	if code, body := controlGet(t, a.Agent, "/v1/agent/self"); code != http.StatusOK || !strings.Contains(body, `"name":"i-1"`) {
		t.Errorf("GET /v1/agent/self on the socket: %d %s", code, body)
	}
	entries, _ := os.ReadDir(cfg.DataDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".control-") {
			t.Errorf("the directory the socket was bound in is left behind: %s", e.Name())
		}
	}

	// A second agent on the same data dir does not take the socket.
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "is the socket of an agent that is running") {
		t.Errorf("a second agent on the data dir: %v", err)
	}
	a.cancel()
	<-a.done
	close(a.done)
	if _, err := os.Lstat(a.ControlSocket()); !os.IsNotExist(err) {
		t.Errorf("the socket is left behind after the agent stopped: %v", err)
	}
}

func TestControlSocketPathRefusals(t *testing.T) {
	srv := startServer(t)
	cfg := config(t, "i-1", newProcTable(t), srv)
	cfg.ControlSocket = filepath.Join(cfg.DataDir, strings.Repeat("s", 120))
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "over the 107 a Unix socket's path may have") {
		t.Errorf("a path too long: %v", err)
	}
	cfg.ControlSocket = filepath.Join(cfg.DataDir, "file")
	if err := os.WriteFile(cfg.ControlSocket, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "exists and is not a socket") {
		t.Errorf("a file in the way: %v", err)
	}
	if b, _ := os.ReadFile(cfg.ControlSocket); string(b) != "keep me" {
		t.Errorf("the file in the way was changed: %q", b)
	}
	cfg.ControlSocket = ""
	cfg.ControlAddr = "127.0.0.1:0"
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "-control-addr: needs TLS") {
		t.Errorf("a TCP control address without TLS: %v", err)
	}
}

// TestHelperDialControlSocket is not a test: TestControlSocketRefusesAnotherUser
// runs the test binary as another user with it, to dial the socket.
func TestHelperDialControlSocket(t *testing.T) {
	path := os.Getenv("TRELLIS_TEST_DIAL_SOCKET")
	if path == "" {
		t.Skip("a helper of TestControlSocketRefusesAnotherUser")
	}
	hc, base, _ := Control{Socket: path}.client()
	resp, err := hc.Post(base+"/v1/agent/leave", "", nil)
	if err != nil {
		os.Stdout.WriteString("REFUSED: " + err.Error() + "\n")
		return
	}
	resp.Body.Close()
	os.Stdout.WriteString("ANSWERED: " + resp.Status + "\n")
}

// An attacker is a process of another user on the instance: the socket's
// mode refuses it, though every directory on the way lets it through.
func TestControlSocketRefusesAnotherUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a process as nobody")
	}
	// A data dir any user may traverse, so that the refusal is the
	// socket's own.
	dir, err := os.MkdirTemp("", "agentctl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The test binary, where nobody may run it.
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "agent.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t)
	cfg := config(t, "i-1", newProcTable(t), srv)
	cfg.DataDir = filepath.Join(dir, "data")
	if err := os.Mkdir(cfg.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, cfg)
	registered(t, srv, a)

	dial := func(cred *syscall.Credential) string {
		cmd := exec.Command(bin, "-test.run=^TestHelperDialControlSocket$")
		cmd.Env = append(os.Environ(), "TRELLIS_TEST_DIAL_SOCKET="+a.ControlSocket())
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the helper failed: %v\n%s", err, out)
		}
		return string(out)
	}
	out := dial(&syscall.Credential{Uid: 65534, Gid: 65534})
	if !strings.Contains(out, "REFUSED:") || !strings.Contains(out, "permission denied") {
		t.Fatalf("a process of nobody dialing the control socket: %s", out)
	}
	if _, in := srv.instance(t, "i-1"); in.GetStatus() == orchestrator.InstanceLeft {
		t.Fatal("the agent left on nobody's word")
	}
	if code, _ := controlGet(t, a.Agent, "/v1/agent/self"); code != http.StatusOK {
		t.Fatalf("the agent's own user cannot reach the socket: %d", code)
	}
}

// A task reaches the agent only at its metadata URI's address, and there
// it reads its own metadata and nothing else: not another task's logs,
// not the agent's state, not leave.
func TestMetadataAddressServesOnlyMetadata(t *testing.T) {
	srv := startServer(t)
	cfg := config(t, "i-1", newProcTable(t), srv)
	a := startAgent(t, cfg)
	registered(t, srv, a)
	srv.registerDefinition(t, "default", shDefinition("meta", `echo "$TRELLIS_TASK_METADATA_URI" > uri; echo DB_PASSWORD=hunter2; exec sleep 1000`))
	uris := map[string]string{}
	for _, name := range []string{"t1", "t2"} {
		res := srv.place(t, "default", name, "meta:1", "i-1")
		srv.waitTask(t, "default", name, "runs", lastStatus(orchestrator.StatusRunning))
		uris[name] = readFileEventually(t, filepath.Join(tasks.TaskDir(cfg.DataDir, res.GetId().GetUid()), "uri"))
	}
	for name, uri := range uris {
		md, err := ReadMetadata(context.Background(), uri)
		if err != nil {
			t.Fatal(err)
		}
		if md.Name != name {
			t.Errorf("%s's metadata URI serves %s's metadata", name, md.Name)
		}
	}
	base := "http://" + a.HTTPAddr()
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/tasks/default/t2/logs/app"},
		{"GET", "/v1/agent/self"},
		{"GET", "/v1/agent/leaves"},
		{"POST", "/v1/agent/leave"},
		{"GET", "/v1/metadata/"},
		{"PUT", "/v1/metadata/x"},
	} {
		req, _ := http.NewRequest(c.method, base+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || strings.Contains(string(b), "hunter2") || strings.Contains(string(b), `"tasks"`) {
			t.Errorf("%s %s on the metadata address: %d %s; want 404 and nothing else", c.method, c.path, resp.StatusCode, b)
		}
	}
	if _, in := srv.instance(t, "i-1"); in.GetStatus() == orchestrator.InstanceLeft || a.Agent.tasks.Leaving() {
		t.Fatal("the agent is leaving on a task's word")
	}
	// The operator's control socket still serves the logs.
	eventually(t, "the logs on the control socket", func() bool {
		code, body := controlGet(t, a.Agent, "/v1/tasks/default/t2/logs/app")
		return code == http.StatusOK && strings.Contains(body, "hunter2")
	})
}

// writePair writes a key pair's files into dir and returns their paths.
func writePair(t *testing.T, dir, name string, kp *tlsutil.KeyPair) (cert, key string) {
	t.Helper()
	cert, key = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(cert, kp.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, kp.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// The TCP control address is served over mutual TLS only: with a control
// certificate of the cluster CA, to clients of that CA.
func TestControlAddrNeedsMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := tlsutil.GenerateCA(tlsutil.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	caFile, _ := writePair(t, dir, "ca", ca)
	gen := func(kind tlsutil.Kind, name string, by *tlsutil.KeyPair) (string, string) {
		kp, err := tlsutil.GenerateCert(by, tlsutil.CertOptions{Kind: kind, Days: 1})
		if err != nil {
			t.Fatal(err)
		}
		return writePair(t, dir, name, kp)
	}
	controlCert, controlKey := gen(tlsutil.KindControl, "control", ca)
	clientCert, clientKey := gen(tlsutil.KindClient, "client", ca)
	serverCert, serverKey := gen(tlsutil.KindServer, "server", ca)
	other, _ := tlsutil.GenerateCA(tlsutil.CAOptions{})
	strangerCert, strangerKey := gen(tlsutil.KindClient, "stranger", other)

	incoming := func(cert, key string) (*tls.Config, error) {
		tc, err := tlsutil.New(tlsutil.Config{CAFile: caFile, CertFile: cert, KeyFile: key})
		if err != nil {
			return nil, err
		}
		return tc.IncomingControlConfig()
	}
	// Only a control certificate serves it.
	if _, err := incoming(serverCert, serverKey); err == nil || !strings.Contains(err.Error(), "not a control certificate") {
		t.Errorf("a server certificate on the control address: %v", err)
	}
	if _, err := incoming(clientCert, clientKey); err == nil || !strings.Contains(err.Error(), "not valid for server authentication") {
		t.Errorf("a client certificate on the control address: %v", err)
	}
	cfgTLS, err := incoming(controlCert, controlKey)
	if err != nil {
		t.Fatal(err)
	}

	srv := startServer(t)
	cfg := config(t, "i-1", newProcTable(t), srv)
	cfg.ControlAddr, cfg.ControlTLS = "127.0.0.1:0", cfgTLS
	a := startAgent(t, cfg)
	clientTLS := func(cert, key string) *tls.Config {
		tc, err := tlsutil.New(tlsutil.Config{CAFile: caFile, CertFile: cert, KeyFile: key})
		if err != nil {
			t.Fatal(err)
		}
		return tc.OutgoingControlConfig()
	}
	self := func(c *tls.Config) error {
		hc, base, err := Control{Addr: a.ControlAddr(), TLS: c}.client()
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get(base + "/v1/agent/self")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	if err := self(clientTLS(clientCert, clientKey)); err != nil {
		t.Fatalf("a client of the cluster CA: %v", err)
	}
	if err := self(clientTLS("", "")); err == nil {
		t.Error("a client without a certificate was served")
	}
	stranger, err := tls.LoadX509KeyPair(strangerCert, strangerKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := self(&tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{stranger}, InsecureSkipVerify: true}); err == nil {
		t.Error("a client of another CA was served")
	}
	// Plaintext HTTP on the control address answers nothing.
	if resp, err := http.Get("http://" + a.ControlAddr() + "/v1/agent/self"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plaintext HTTP was served on the control address")
		}
	}
}

// An agent killed without removing its socket leaves it behind: the next
// agent on the data dir, finding no one answering there, takes its place.
func TestControlSocketLeftByADeadAgent(t *testing.T) {
	srv := startServer(t)
	cfg := config(t, "i-1", newProcTable(t), srv)
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: ControlSocket(cfg.DataDir), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	a := startAgent(t, cfg)
	if code, _ := controlGet(t, a.Agent, "/v1/agent/self"); code != http.StatusOK {
		t.Fatalf("the new agent's socket answers %d", code)
	}
}
