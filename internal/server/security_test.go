package server

import (
	"slices"
	"testing"
	"time"

	"trellis.dev/trellis/internal/tlsutil"
)

func TestSecurityWarnings(t *testing.T) {
	b, err := tlsutil.NewDevBundle("", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	secured, err := tlsutil.NewFromBundle(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"in memory: no other server to talk to", Config{}, nil},
		{"raft in plaintext", Config{Raft: &RaftConfig{DataDir: "/d", BootstrapExpect: 3}}, []string{WarnPlaintext}},
		{"raft with TLS", Config{Raft: &RaftConfig{DataDir: "/d", BootstrapExpect: 3}, TLS: secured}, nil},
	} {
		if got := securityWarnings(tc.cfg); !slices.Equal(got, tc.want) {
			t.Errorf("%s: securityWarnings = %q, want %q", tc.name, got, tc.want)
		}
	}
}
