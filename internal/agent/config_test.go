package agent

import (
	"crypto/tls"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestParseMemTotal(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"MemTotal:       16333364 kB\nMemFree: 1 kB\n", 16333364 * 1024},
		{"MemFree: 1 kB\nMemTotal: 2048 kB\n", 2048 * 1024},
		{"MemTotal: 512\n", 512},
		{"MemTotal: lots kB\n", 0},
		{"", 0},
	} {
		if got := parseMemTotal(strings.NewReader(c.in)); got != c.want {
			t.Errorf("parseMemTotal(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestConfigRefusals(t *testing.T) {
	good := func() Config {
		return Config{Servers: []string{"127.0.0.1:7701"}, DataDir: "/tmp/x", Name: "i-1", NewRunner: func(RunnerConfig) (TaskRunner, error) { return nil, nil }}
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("a good config is refused: %v", err)
	}
	noRunner := good()
	noRunner.NewRunner = nil
	if _, err := New(noRunner); err == nil || !strings.Contains(err.Error(), "NewRunner: required") {
		t.Errorf("New without a runner: %v", err)
	}
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Servers = nil }, "-server: at least one"},
		{func(c *Config) { c.Servers = []string{"7701"} }, `-server: "7701" is not host:port (a server's gRPC address, for example 127.0.0.1:7701)`},
		{func(c *Config) { c.Servers = []string{"a:1", "a:1"} }, `-server: "a:1" is given twice`},
		{func(c *Config) { c.DataDir = "" }, "-data-dir: required"},
		{func(c *Config) { c.Name = "I_1" }, `-name: "I_1" is not a valid name`},
		{func(c *Config) { c.Cluster = "Prod" }, `-cluster: "Prod" is not a valid name`},
		{func(c *Config) { c.Attributes = map[string]string{"os": "x"} }, `-attribute: "os" is a built-in attribute`},
		{func(c *Config) { c.Attributes = map[string]string{"-x": "x"} }, `-attribute[-x]`},
		{func(c *Config) { c.HTTPAddr = "7710" }, `-http-addr: "7710" is not host:port`},
		{func(c *Config) { c.Datacenter = "DC_1" }, `-datacenter: "DC_1" is not a datacenter name`},
		{func(c *Config) { c.ResignWindow = -time.Second }, `-ca-resign-window: -1s is negative`},
		{func(c *Config) { c.AutoEncrypt = true }, `-auto-encrypt: needs -tls-ca-file`},
		{func(c *Config) { c.AutoEncrypt, c.TLS, c.DisableLeafCache = true, &tls.Config{}, true }, `-auto-encrypt: needs the leaf cache`},
		{func(c *Config) { c.Network = &NetworkConfig{Bridge: "br 0"} }, `-bridge-name: "br 0" is not an interface name`},
		{func(c *Config) { c.Network = &NetworkConfig{Subnet: netip.MustParsePrefix("10.0.0.1/24")} }, `-bridge-subnet: 10.0.0.1/24 is not a network address`},
		{func(c *Config) { c.Network = &NetworkConfig{PluginDirs: []string{"cni"}} }, `-cni-plugin-dir: "cni" is not an absolute path`},
	} {
		cfg := good()
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}
