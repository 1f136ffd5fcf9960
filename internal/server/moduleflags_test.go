package server_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/server"
)

// dnsModule stands for a domain with a flag of its own (-example-addr):
// what Setup saw is recorded.
type dnsModule struct {
	addr    string
	checked module.Settings
	setUp   string
}

func (*dnsModule) Name() string                { return "dns" }
func (*dnsModule) Register(*resource.Registry) {}
func (m *dnsModule) Setup(module.Deps) (module.Parts, error) {
	m.setUp = m.addr
	return module.Parts{}, nil
}
func (m *dnsModule) Flags(fs *pflag.FlagSet, p module.Process) {
	fs.StringVar(&m.addr, "example-addr", "127.0.0.1:8600", "the example's address")
}
func (m *dnsModule) CheckFlags(s module.Settings) error {
	m.checked = s
	if !strings.Contains(m.addr, ":") {
		return errors.New("-example-addr: not host:port")
	}
	return nil
}

// A module's flag, parsed as the command line gives it, reaches its Setup;
// its check runs in Validate with the server's datacenter, and a refusal
// fails server.New naming the flag.
func TestModuleFlagReachesSetup(t *testing.T) {
	m := &dnsModule{}
	mods := append(server.DefaultModules(), m)
	if err := module.ParseFlags(mods, module.Server, "-example-addr", "127.0.0.1:8653"); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Datacenter: "dc7", Modules: mods})
	if err != nil {
		t.Fatal(err)
	}
	_ = srv
	if m.setUp != "127.0.0.1:8653" || m.checked.Datacenter != "dc7" {
		t.Errorf("Setup saw -example-addr %q, CheckFlags the datacenter %q; want 127.0.0.1:8653 and dc7", m.setUp, m.checked.Datacenter)
	}

	bad := &dnsModule{}
	mods = append(server.DefaultModules(), bad)
	if err := module.ParseFlags(mods, module.Server, "--example-addr=nowhere"); err != nil {
		t.Fatal(err)
	}
	_, err = server.New(server.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Modules: mods})
	if !errors.Is(err, server.ErrConfig) || !strings.Contains(err.Error(), "-example-addr: not host:port") || bad.setUp != "" {
		t.Errorf("server.New with a bad -example-addr = %v (set up with %q); want a configuration error naming -example-addr, before any Setup", err, bad.setUp)
	}
}

// The defaults' own flags keep their names, defaults and checks through
// the modules that own them.
func TestDefaultModulesFlags(t *testing.T) {
	if _, err := server.DefaultModulesWith("-heartbeat-ttl", "1ms"); err != nil {
		t.Fatal(err) // parsing takes it; Validate refuses it
	}
	mods, _ := server.DefaultModulesWith("-heartbeat-ttl", "1ms")
	if err := (server.Config{Modules: mods}).Validate(); err == nil || !strings.Contains(err.Error(), "-heartbeat-ttl: 1ms is below the minimum") {
		t.Errorf("Validate -heartbeat-ttl 1ms = %v", err)
	}
	if _, err := server.DefaultModulesWith("-no-such-flag", "x"); err == nil {
		t.Error("an unknown flag was taken")
	}
}
