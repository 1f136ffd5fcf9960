package ca

import (
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	pbca "trellis.dev/trellis/api/ca/v1"
)

// When the active root no longer answers the configuration: another key
// type or size, another rotation, a supplied root that is not it. A
// supplied root that is the active one asks for nothing, whatever else
// the configuration says.
func TestRotationReason(t *testing.T) {
	const td = "11111111-2222-3333-4444-555555555555.trellis"
	supplied, _, err := NewRoot(RootOptions{TrustDomain: td, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	suppliedID, err := KeyID(supplied.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	suppliedPEM := string(EncodeCerts(supplied))
	active := &pbca.CARoot{Id: "aa:bb", PrivateKeyType: "ec", PrivateKeyBits: 256, Rotation: 2}
	cfg := func(typ string, bits int32, rotation uint64, rootCert string) *pbca.CAConfig {
		return &pbca.CAConfig{PrivateKeyType: typ, PrivateKeyBits: bits, Rotation: rotation, RootCert: rootCert}
	}
	cases := []struct {
		name   string
		cfg    *pbca.CAConfig
		active *pbca.CARoot
		want   string // a part of the reason; "" for none
	}{
		{"same settings", cfg("ec", 256, 2, ""), active, ""},
		{"rotation raised", cfg("ec", 256, 3, ""), active, "rotation changes from 2 to 3"},
		{"rotation lowered", cfg("ec", 256, 1, ""), active, "rotation changes from 2 to 1"},
		{"key size", cfg("ec", 384, 2, ""), active, "from ec-256 to ec-384"},
		{"key type", cfg("rsa", 2048, 2, ""), active, "from ec-256 to rsa-2048"},
		{"a supplied root", cfg("ec", 256, 2, suppliedPEM), active, "supplied root"},
		{"the supplied root is active", cfg("rsa", 4096, 9, suppliedPEM), &pbca.CARoot{Id: suppliedID, PrivateKeyType: "ec", PrivateKeyBits: 256}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := RotationReason(c.cfg, c.active)
			if err != nil {
				t.Fatal(err)
			}
			if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
				t.Fatalf("RotationReason = %q, want %q", got, c.want)
			}
		})
	}
	if _, err := RotationReason(cfg("ec", 256, 2, "not pem"), active); err == nil || !strings.Contains(err.Error(), "root_cert") {
		t.Errorf("a root_cert that does not parse: %v, want an error naming root_cert", err)
	}
}

func TestNextPruneAt(t *testing.T) {
	ttl := 72 * time.Hour
	far := t0.Add(10 * 365 * 24 * time.Hour)
	cases := []struct {
		name  string
		roots []RootState
		ttl   time.Duration
		now   time.Time
		want  time.Time
	}{
		{"active only", []RootState{{ID: "a", Active: true, NotAfter: t0.Add(time.Hour)}}, ttl, t0, time.Time{}},
		{"drains at 2 × leaf TTL", []RootState{{ID: "old", RotatedOutAt: t0, NotAfter: far}}, ttl, t0, t0.Add(2 * ttl)},
		{"expires before it drains", []RootState{{ID: "old", RotatedOutAt: t0, NotAfter: t0.Add(time.Hour)}}, ttl, t0, t0.Add(time.Hour)},
		{"the earliest of two", []RootState{
			{ID: "old", RotatedOutAt: t0.Add(time.Hour), NotAfter: far},
			{ID: "older", RotatedOutAt: t0, NotAfter: far},
		}, ttl, t0, t0.Add(2 * ttl)},
		{"already due: the next one", []RootState{
			{ID: "older", RotatedOutAt: t0.Add(-3 * ttl), NotAfter: far},
			{ID: "old", RotatedOutAt: t0, NotAfter: far},
		}, ttl, t0, t0.Add(2 * ttl)},
		{"all due: none later", []RootState{{ID: "old", RotatedOutAt: t0.Add(-3 * ttl), NotAfter: far}}, ttl, t0, time.Time{}},
		{"no leaf TTL: expiry", []RootState{{ID: "old", RotatedOutAt: t0, NotAfter: far}}, 0, t0, far},
		{"the root's own longer leaf TTL", []RootState{{ID: "old", RotatedOutAt: t0, NotAfter: far, LeafTTL: 2 * ttl}}, ttl, t0, t0.Add(4 * ttl)},
		{"the leaf TTL given, when longer", []RootState{{ID: "old", RotatedOutAt: t0, NotAfter: far, LeafTTL: ttl / 2}}, ttl, t0, t0.Add(2 * ttl)},
		{"only the root's leaf TTL", []RootState{{ID: "old", RotatedOutAt: t0, NotAfter: far, LeafTTL: ttl}}, 0, t0, t0.Add(2 * ttl)},
		{"none", nil, ttl, t0, time.Time{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := NextPruneAt(c.roots, c.ttl, c.now); !got.Equal(c.want) {
				t.Fatalf("NextPruneAt = %v, want %v", got, c.want)
			}
		})
	}
}

// NextPruneAt agrees with RootsToPrune: nothing more is pruned before it,
// something more is pruned at it, and nothing more ever when it is zero.
func TestNextPruneAtAgreesWithRootsToPrune(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 5).Draw(t, "n")
		var roots []RootState
		for i := range n {
			r := RootState{ID: string(rune('a' + i)), Active: rapid.Bool().Draw(t, "active")}
			if rapid.Bool().Draw(t, "rotated") {
				r.RotatedOutAt = t0.Add(time.Duration(rapid.Int64Range(-1e15, 1e15).Draw(t, "out")))
			}
			r.NotAfter = t0.Add(time.Duration(rapid.Int64Range(-1e15, 1e15).Draw(t, "notAfter")))
			r.LeafTTL = time.Duration(rapid.Int64Range(-1e12, 1e15).Draw(t, "rootTTL"))
			roots = append(roots, r)
		}
		ttl := time.Duration(rapid.Int64Range(-1e12, 1e15).Draw(t, "ttl"))
		now := t0
		before := len(RootsToPrune(roots, ttl, now))
		next := NextPruneAt(roots, ttl, now)
		if next.IsZero() {
			if later := len(RootsToPrune(roots, ttl, now.Add(1e17))); later != before {
				t.Fatalf("no next prune time, yet %d roots are pruned much later against %d now", later, before)
			}
			return
		}
		if !next.After(now) {
			t.Fatalf("next prune time %v is not after now %v", next, now)
		}
		if got := len(RootsToPrune(roots, ttl, next.Add(-time.Nanosecond))); got != before {
			t.Fatalf("%d roots pruned just before the next prune time, %d now", got, before)
		}
		if got := len(RootsToPrune(roots, ttl, next)); got <= before {
			t.Fatalf("%d roots pruned at the next prune time, no more than the %d now", got, before)
		}
	})
}
