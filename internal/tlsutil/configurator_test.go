package tlsutil

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testPKI is a cluster CA, another CA, and files written from them.
type testPKI struct {
	t         *testing.T
	dir       string
	ca, other *KeyPair
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	return &testPKI{t: t, dir: t.TempDir(), ca: mustCA(t, CAOptions{}), other: mustCA(t, CAOptions{})}
}

func (p *testPKI) cert(ca *KeyPair, kind Kind, dc string) *KeyPair {
	p.t.Helper()
	kp, err := GenerateCert(ca, CertOptions{Kind: kind, Datacenter: dc})
	if err != nil {
		p.t.Fatal(err)
	}
	return kp
}

// write writes data to the file name of the PKI's directory and returns
// its path.
func (p *testPKI) write(name string, data []byte) string {
	p.t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// serverConfig writes the cluster CA and kp as a server's files and
// returns the Config that names them.
func (p *testPKI) serverConfig(kp *KeyPair) Config {
	return Config{
		CAFile:   p.write("ca.pem", p.ca.CertPEM),
		CertFile: p.write("server.pem", kp.CertPEM),
		KeyFile:  p.write("server-key.pem", kp.KeyPEM),
		Server:   true,
	}
}

func (p *testPKI) configurator(cfg Config) *Configurator {
	p.t.Helper()
	c, err := New(cfg)
	if err != nil {
		p.t.Fatal(err)
	}
	return c
}

// handshake connects a TLS client to a TLS server over loopback TCP and
// returns each side's error and what the client saw. The server writes one
// byte after its handshake and the client reads it, so that a refusal the
// server decides after the client's handshake ended (TLS 1.3 verifies the
// client's certificate last) reaches the client too.
func handshake(t *testing.T, server, client *tls.Config) (state tls.ConnectionState, serverErr, clientErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// A guard against a hung test, not a wait for anything.
	deadline := time.Now().Add(30 * time.Second)
	done := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer conn.Close()
		conn.SetDeadline(deadline)
		s := tls.Server(conn, server)
		err = s.Handshake()
		if err == nil {
			_, err = s.Write([]byte{1})
		}
		done <- err
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(deadline)
	c := tls.Client(conn, client)
	clientErr = c.Handshake()
	if clientErr == nil {
		_, clientErr = io.ReadFull(c, make([]byte, 1))
	}
	state = c.ConnectionState()
	c.Close()
	return state, <-done, clientErr
}

// rawClient presents kp's certificate whatever CAs the server names in
// its request, and verifies nothing: a peer that tries its luck.
func rawClient(kp *KeyPair) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}
	if kp != nil {
		cert := tlsCert(kp)
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	return cfg
}

func rawServer(kp *KeyPair) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{tlsCert(kp)}}
}

func tlsCert(kp *KeyPair) tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{kp.Cert.Raw}, PrivateKey: kp.Key, Leaf: kp.Cert}
}

// mustConfig unwraps a tls.Config of a server's Configurator, which
// cannot fail.
func mustConfig(cfg *tls.Config, err error) *tls.Config {
	if err != nil {
		panic(err)
	}
	return cfg
}

func TestServerToServerPortRefusesAClientWithoutAServerCertificate(t *testing.T) {
	p := newPKI(t)
	srv := p.configurator(p.serverConfig(p.cert(p.ca, KindServer, "dc1")))
	incoming := mustConfig(srv.IncomingServerConfig())
	for _, tc := range []struct {
		name    string
		peer    *KeyPair
		wantErr string // of the server; "" accepts
	}{
		{"a server certificate of the cluster", p.cert(p.ca, KindServer, "dc1"), ""},
		{"no certificate", nil, "client didn't provide a certificate"},
		{"a client certificate of the cluster", p.cert(p.ca, KindClient, "dc1"), `"client.dc1.trellis" is not a certificate of server.dc1.trellis`},
		{"a server certificate of another CA", p.cert(p.other, KindServer, "dc1"), `"server.dc1.trellis" is not signed by the cluster CA`},
		{"a server certificate of another datacenter", p.cert(p.ca, KindServer, "dc2"), `"server.dc2.trellis" is not a certificate of server.dc1.trellis`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, serverErr, clientErr := handshake(t, incoming, rawClient(tc.peer))
			if tc.wantErr == "" {
				if serverErr != nil || clientErr != nil {
					t.Fatalf("refused: server %v, client %v", serverErr, clientErr)
				}
				return
			}
			if serverErr == nil || !strings.Contains(serverErr.Error(), tc.wantErr) {
				t.Fatalf("server error %v, want %q", serverErr, tc.wantErr)
			}
			if clientErr == nil {
				t.Fatal("the refused client could read from the connection")
			}
		})
	}
}

func TestServersAuthenticateEachOther(t *testing.T) {
	p := newPKI(t)
	a := p.configurator(p.serverConfig(p.cert(p.ca, KindServer, "dc1")))
	b := p.configurator(p.serverConfig(p.cert(p.ca, KindServer, "dc1")))
	state, serverErr, clientErr := handshake(t, mustConfig(a.IncomingServerConfig()), mustConfig(b.OutgoingServerConfig()))
	if serverErr != nil || clientErr != nil {
		t.Fatalf("server %v, client %v", serverErr, clientErr)
	}
	if state.Version != tls.VersionTLS13 {
		t.Errorf("version %x, want TLS 1.3", state.Version)
	}
	if got := state.PeerCertificates[0].SerialNumber; got.Cmp(a.Certificate().SerialNumber) != 0 {
		t.Errorf("served serial %v, want a's %v", got, a.Certificate().SerialNumber)
	}
}

func TestDialersAcceptOnlyAServerOfTheCluster(t *testing.T) {
	p := newPKI(t)
	srv := p.configurator(p.serverConfig(p.cert(p.ca, KindServer, "dc1")))
	agent := p.configurator(Config{CAFile: p.write("agent-ca.pem", p.ca.CertPEM)})
	clientKP := p.cert(p.ca, KindClient, "dc1")
	withClientCert := p.configurator(Config{
		CAFile:   p.write("agent-ca.pem", p.ca.CertPEM),
		CertFile: p.write("client.pem", clientKP.CertPEM),
		KeyFile:  p.write("client-key.pem", clientKP.KeyPEM),
	})
	dialers := map[string]*tls.Config{
		"server to server":                mustConfig(srv.OutgoingServerConfig()),
		"agent":                           agent.OutgoingClientConfig(),
		"agent with a client certificate": withClientCert.OutgoingClientConfig(),
	}
	for _, tc := range []struct {
		name    string
		serves  *KeyPair
		wantErr string // of the dialer; "" accepts
	}{
		{"a server of the cluster", p.cert(p.ca, KindServer, "dc1"), ""},
		{"a client certificate of the cluster", p.cert(p.ca, KindClient, "dc1"), `"client.dc1.trellis" is not valid for server authentication`},
		{"a server of another CA", p.cert(p.other, KindServer, "dc1"), "is not signed by the cluster CA"},
		{"a server of another datacenter", p.cert(p.ca, KindServer, "dc2"), "is not a certificate of server.dc1.trellis"},
	} {
		for name, dialer := range dialers {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				_, _, clientErr := handshake(t, rawServer(tc.serves), dialer)
				if tc.wantErr == "" {
					if clientErr != nil {
						t.Fatalf("refused: %v", clientErr)
					}
				} else if clientErr == nil || !strings.Contains(clientErr.Error(), tc.wantErr) {
					t.Fatalf("client error %v, want %q", clientErr, tc.wantErr)
				}
			})
		}
	}
}

func TestPublicPortNeedsNoClientCertificate(t *testing.T) {
	p := newPKI(t)
	srv := p.configurator(p.serverConfig(p.cert(p.ca, KindServer, "dc1")))
	agent := p.configurator(Config{CAFile: p.write("agent-ca.pem", p.ca.CertPEM)})
	state, serverErr, clientErr := handshake(t, mustConfig(srv.IncomingPublicConfig()), agent.OutgoingClientConfig())
	if serverErr != nil || clientErr != nil {
		t.Fatalf("server %v, client %v", serverErr, clientErr)
	}
	if state.PeerCertificates[0].Subject.CommonName != "server.dc1.trellis" {
		t.Fatalf("served %q", state.PeerCertificates[0].Subject.CommonName)
	}
	// A TLS 1.2 client is refused on every port.
	old := agent.OutgoingClientConfig()
	old.MinVersion, old.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	if _, serverErr, _ := handshake(t, mustConfig(srv.IncomingPublicConfig()), old); serverErr == nil || !strings.Contains(serverErr.Error(), "client offered only unsupported versions") {
		t.Fatalf("a TLS 1.2 client: server error %v", serverErr)
	}
}

func TestOnlyAServerGetsServerConfigs(t *testing.T) {
	p := newPKI(t)
	agent := p.configurator(Config{CAFile: p.write("ca.pem", p.ca.CertPEM)})
	for name, f := range map[string]func() (*tls.Config, error){
		"IncomingServerConfig": agent.IncomingServerConfig,
		"IncomingPublicConfig": agent.IncomingPublicConfig,
		"OutgoingServerConfig": agent.OutgoingServerConfig,
	} {
		if _, err := f(); !errors.Is(err, ErrNotServer) {
			t.Errorf("%s of an agent: %v, want ErrNotServer", name, err)
		}
	}
}

func TestNewRefusesBadFiles(t *testing.T) {
	p := newPKI(t)
	server := p.cert(p.ca, KindServer, "dc1")
	client := p.cert(p.ca, KindClient, "dc1")
	foreign := p.cert(p.other, KindServer, "dc1")
	dc2 := p.cert(p.ca, KindServer, "dc2")
	ca := p.write("ca.pem", p.ca.CertPEM)
	cert := p.write("server.pem", server.CertPEM)
	key := p.write("server-key.pem", server.KeyPEM)
	for _, tc := range []struct {
		name     string
		cfg      Config
		wantFlag string
		wantErr  string
	}{
		{"no CA", Config{CertFile: cert, KeyFile: key, Server: true}, FlagCAFile, "-tls-ca-file: required"},
		{"server without certificate", Config{CAFile: ca, Server: true}, FlagCertFile, "-tls-cert-file: required on a server"},
		{"certificate without key", Config{CAFile: ca, CertFile: cert, Server: true}, FlagKeyFile, "-tls-key-file: required with -tls-cert-file"},
		{"key without certificate", Config{CAFile: ca, KeyFile: key}, FlagCertFile, "-tls-cert-file: required with -tls-key-file"},
		{"missing CA file", Config{CAFile: filepath.Join(p.dir, "nope.pem")}, FlagCAFile, "nope.pem: no such file or directory"},
		{"CA file holds a leaf", Config{CAFile: cert}, FlagCAFile, `"server.dc1.trellis" is not a CA certificate`},
		{"CA file is not PEM", Config{CAFile: p.write("junk.pem", []byte("junk"))}, FlagCAFile, "no PEM CERTIFICATE block"},
		{"key of another certificate", Config{CAFile: ca, CertFile: cert, KeyFile: p.write("client-key.pem", client.KeyPEM), Server: true},
			FlagKeyFile, "client-key.pem: it is not the key of the certificate in -tls-cert-file"},
		{"key file holds a certificate", Config{CAFile: ca, CertFile: cert, KeyFile: cert, Server: true}, FlagKeyFile, "no PEM private key block"},
		{"certificate of another CA", Config{CAFile: ca, CertFile: p.write("f.pem", foreign.CertPEM), KeyFile: p.write("f-key.pem", foreign.KeyPEM), Server: true},
			FlagCertFile, "is not signed by the cluster CA (-tls-ca-file)"},
		{"a client certificate on a server", Config{CAFile: ca, CertFile: p.write("c.pem", client.CertPEM), KeyFile: p.write("c-key.pem", client.KeyPEM), Server: true},
			FlagCertFile, `"client.dc1.trellis" is not valid for server authentication`},
		{"a server of another datacenter", Config{CAFile: ca, CertFile: p.write("dc2.pem", dc2.CertPEM), KeyFile: p.write("dc2-key.pem", dc2.KeyPEM), Server: true},
			FlagCertFile, `not a server certificate of datacenter "dc1": it names [server.dc2.trellis, localhost], a server's names server.dc1.trellis`},
		{"the CA as a certificate", Config{CAFile: ca, CertFile: p.write("cac.pem", p.ca.CertPEM), KeyFile: p.write("cak.pem", p.ca.KeyPEM)},
			FlagCertFile, "is a CA certificate"},
		{"expired", Config{CAFile: ca, CertFile: cert, KeyFile: key, Server: true, Now: func() time.Time { return time.Now().AddDate(2, 0, 0) }},
			FlagCertFile, `"server.dc1.trellis" is valid only from`},
		{"bad datacenter", Config{CAFile: ca, Datacenter: "DC1"}, "", `datacenter: "DC1" is not a datacenter name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
			var fe *FileError
			if tc.wantFlag != "" && (!errors.As(err, &fe) || fe.Flag != tc.wantFlag) {
				t.Fatalf("err %v names no flag %s", err, tc.wantFlag)
			}
		})
	}
	// An agent needs the CA alone; a client certificate is optional.
	if _, err := New(Config{CAFile: ca}); err != nil {
		t.Fatalf("an agent with the CA alone: %v", err)
	}
}

// servedSerial is the serial of the certificate srv serves now.
func servedSerial(t *testing.T, public *tls.Config, dialer *tls.Config) *big.Int {
	t.Helper()
	state, serverErr, clientErr := handshake(t, public, dialer)
	if serverErr != nil || clientErr != nil {
		t.Fatalf("server %v, client %v", serverErr, clientErr)
	}
	return state.PeerCertificates[0].SerialNumber
}

func TestReloadSwapsTheServedCertificate(t *testing.T) {
	p := newPKI(t)
	first := p.cert(p.ca, KindServer, "dc1")
	cfg := p.serverConfig(first)
	srv := p.configurator(cfg)
	// Made once, before the reload, as a listener's would be.
	public := mustConfig(srv.IncomingPublicConfig())
	dialer := p.configurator(Config{CAFile: cfg.CAFile}).OutgoingClientConfig()
	if got := servedSerial(t, public, dialer); got.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("serves %v, want %v", got, first.Cert.SerialNumber)
	}

	second := p.cert(p.ca, KindServer, "dc1")
	p.write("server.pem", second.CertPEM)
	p.write("server-key.pem", second.KeyPEM)
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := servedSerial(t, public, dialer); got.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatalf("after reload serves %v, want %v", got, second.Cert.SerialNumber)
	}
}

func TestBrokenReloadKeepsTheOldCertificate(t *testing.T) {
	p := newPKI(t)
	good := p.cert(p.ca, KindServer, "dc1")
	cfg := p.serverConfig(good)
	srv := p.configurator(cfg)
	public := mustConfig(srv.IncomingPublicConfig())
	incoming := mustConfig(srv.IncomingServerConfig())
	dialer := p.configurator(Config{CAFile: cfg.CAFile}).OutgoingClientConfig()
	peer := p.cert(p.ca, KindServer, "dc1")
	other := p.cert(p.ca, KindServer, "dc1")
	client := p.cert(p.ca, KindClient, "dc1")
	foreign := p.cert(p.other, KindServer, "dc1")

	for _, tc := range []struct {
		name             string
		ca, cert, key    []byte
		remove           string
		wantFlag, wantIn string
	}{
		{name: "a key of another certificate", key: other.KeyPEM, wantFlag: FlagKeyFile, wantIn: "is not the key of the certificate"},
		{name: "a half-written certificate", cert: good.CertPEM[:len(good.CertPEM)/2], wantFlag: FlagCertFile, wantIn: "no PEM CERTIFICATE block"},
		{name: "a client certificate", cert: client.CertPEM, key: client.KeyPEM, wantFlag: FlagCertFile, wantIn: "not valid for server authentication"},
		{name: "a certificate of another CA", cert: foreign.CertPEM, key: foreign.KeyPEM, wantFlag: FlagCertFile, wantIn: "not signed by the cluster CA"},
		{name: "a CA that did not sign the certificate", ca: p.other.CertPEM, wantFlag: FlagCertFile, wantIn: "not signed by the cluster CA"},
		{name: "a removed key", remove: cfg.KeyFile, wantFlag: FlagKeyFile, wantIn: "no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.ca != nil {
				p.write("ca.pem", tc.ca)
			}
			if tc.cert != nil {
				p.write("server.pem", tc.cert)
			}
			if tc.key != nil {
				p.write("server-key.pem", tc.key)
			}
			if tc.remove != "" {
				os.Remove(tc.remove)
			}
			t.Cleanup(func() { p.serverConfig(good) })

			err := srv.Reload()
			var fe *FileError
			if !errors.As(err, &fe) || fe.Flag != tc.wantFlag || !strings.Contains(err.Error(), tc.wantIn) {
				t.Fatalf("reload: %v, want %s and %q", err, tc.wantFlag, tc.wantIn)
			}
			if got := servedSerial(t, public, dialer); got.Cmp(good.Cert.SerialNumber) != 0 {
				t.Fatalf("serves %v after a failed reload, want the old %v", got, good.Cert.SerialNumber)
			}
			// The old CA still admits the servers it signed.
			if _, serverErr, _ := handshake(t, incoming, rawClient(peer)); serverErr != nil {
				t.Fatalf("the server-to-server port refused a server after a failed reload: %v", serverErr)
			}
		})
	}
}

func TestReloadOfTheCA(t *testing.T) {
	p := newPKI(t)
	srv := p.configurator(p.serverConfig(p.cert(p.ca, KindServer, "dc1")))
	incoming := mustConfig(srv.IncomingServerConfig())
	newPeer := p.cert(p.other, KindServer, "dc1")
	if _, serverErr, _ := handshake(t, incoming, rawClient(newPeer)); serverErr == nil {
		t.Fatal("a server of another CA was admitted")
	}
	// The cluster moves to the other CA: this server gets a certificate
	// of it and trusts it alone.
	p.ca = p.other
	p.serverConfig(p.cert(p.other, KindServer, "dc1"))
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, serverErr, _ := handshake(t, incoming, rawClient(newPeer)); serverErr != nil {
		t.Fatalf("after the CA reload, a server of the new CA was refused: %v", serverErr)
	}
}

// recordHandler sends each log record's message and attributes on a
// channel, so that a test waits for the log line it expects.
type recordHandler struct{ records chan slog.Record }

func (h recordHandler) Enabled(context.Context, slog.Level) bool      { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error { h.records <- r; return nil }
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler            { return h }
func (h recordHandler) WithGroup(string) slog.Handler                 { return h }

func TestWatchReloadsOnEverySignal(t *testing.T) {
	p := newPKI(t)
	srv := p.configurator(p.serverConfig(p.cert(p.ca, KindServer, "dc1")))
	h := recordHandler{records: make(chan slog.Record)}
	sigs := make(chan os.Signal)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { watchReloads(ctx, srv, slog.New(h), sigs); close(done) }()
	defer func() { cancel(); <-done }()

	next := p.cert(p.ca, KindServer, "dc1")
	p.serverConfig(next)
	sigs <- os.Interrupt // any signal value: the loop reloads on each
	r := <-h.records
	attrs := map[string]string{}
	r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
	if r.Message != "TLS certificates reloaded" || attrs["serial"] != next.Cert.SerialNumber.Text(16) {
		t.Fatalf("logged %q %v, want the reload of serial %s", r.Message, attrs, next.Cert.SerialNumber.Text(16))
	}

	p.write("server-key.pem", []byte("broken"))
	sigs <- os.Interrupt
	r = <-h.records
	if r.Level != slog.LevelError || !strings.Contains(r.Message, "TLS reload failed") {
		t.Fatalf("logged %v %q after a broken reload", r.Level, r.Message)
	}
	if got := srv.Certificate().SerialNumber; got.Cmp(next.Cert.SerialNumber) != 0 {
		t.Fatalf("in use %v, want %v", got, next.Cert.SerialNumber)
	}
}

// A CA file of two CAs, as a CA rotation uses: servers of either are
// admitted while the cluster moves.
func TestCAFileOfTwoCAsAdmitsServersOfBoth(t *testing.T) {
	p := newPKI(t)
	cfg := p.serverConfig(p.cert(p.ca, KindServer, "dc1"))
	p.write("ca.pem", append(append([]byte{}, p.ca.CertPEM...), p.other.CertPEM...))
	srv := p.configurator(cfg)
	incoming := mustConfig(srv.IncomingServerConfig())
	for _, peer := range []*KeyPair{p.cert(p.ca, KindServer, "dc1"), p.cert(p.other, KindServer, "dc1")} {
		if _, serverErr, clientErr := handshake(t, incoming, rawClient(peer)); serverErr != nil || clientErr != nil {
			t.Fatalf("server %v, client %v", serverErr, clientErr)
		}
	}
}

// The in-memory material of `trellis dev` serves both ports, to a client
// that trusts the dev CA, with the dev client certificate.
func TestDevBundleServesTLS(t *testing.T) {
	b, err := NewDevBundle("", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewFromBundle(b)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{t: t, dir: t.TempDir()}
	agent := p.configurator(Config{CAFile: p.write("dev-ca.pem", b.CA.CertPEM)})
	if _, serverErr, clientErr := handshake(t, mustConfig(srv.IncomingPublicConfig()), agent.OutgoingClientConfig()); serverErr != nil || clientErr != nil {
		t.Fatalf("public port: server %v, client %v", serverErr, clientErr)
	}
	if _, serverErr, clientErr := handshake(t, mustConfig(srv.IncomingServerConfig()), mustConfig(srv.OutgoingServerConfig())); serverErr != nil || clientErr != nil {
		t.Fatalf("server port: server %v, client %v", serverErr, clientErr)
	}
	if _, serverErr, _ := handshake(t, mustConfig(srv.IncomingServerConfig()), rawClient(b.Client)); serverErr == nil {
		t.Fatal("the server port admitted the dev client certificate")
	}
}
