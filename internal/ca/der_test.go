package ca

import (
	"bytes"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The DER primitives the leaf encoder writes by hand must be what
// encoding/asn1 writes for the same values: properties over random
// values, each compared with asn1.Marshal.

func TestDERLengthsMatchEncodingASN1(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// Lengths around each boundary of the long form: 127/128,
		// 255/256, 65535/65536.
		n := rapid.OneOf(rapid.IntRange(0, 300), rapid.IntRange(65000, 70000)).Draw(t, "n")
		content := bytes.Repeat([]byte{0x5a}, n)
		want := mustMarshal(content)
		if got := appendTLV(nil, tagOctetString, content); !bytes.Equal(got, want) {
			t.Fatalf("an OCTET STRING of %d octets: %x…, want %x…", n, got[:min(8, len(got))], want[:min(8, len(want))])
		}
		if got := append(appendHeader(nil, tagOctetString, n), content...); !bytes.Equal(got, want) {
			t.Fatalf("appendHeader of %d octets: %x…, want %x…", n, got[:min(8, len(got))], want[:min(8, len(want))])
		}
		if got := tlvSize(n); got != len(want) {
			t.Fatalf("tlvSize(%d) = %d, want %d", n, got, len(want))
		}
	})
}

func TestDERIntegersMatchEncodingASN1(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOfN(rapid.Byte(), 1, 20).Draw(t, "bytes")
		n := new(big.Int).SetBytes(b)
		if n.Sign() == 0 {
			n.SetInt64(1)
		}
		got, err := appendPositiveInteger(nil, n)
		if err != nil {
			t.Fatal(err)
		}
		if want := mustMarshal(n); !bytes.Equal(got, want) {
			t.Fatalf("%x: %x, want %x", n, got, want)
		}
	})
	for _, n := range []*big.Int{nil, big.NewInt(0), big.NewInt(-5)} {
		if _, err := appendPositiveInteger(nil, n); err == nil {
			t.Errorf("%v encoded as a serial", n)
		}
	}
}

func TestDERTimesMatchEncodingASN1(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// Years 1900 to 2200: UTCTime from 1950 through 2049, else
		// GeneralizedTime; zones other than UTC and sub-seconds too.
		sec := rapid.Int64Range(-2208988800, 7258118400).Draw(t, "unix")
		nsec := rapid.Int64Range(0, 999999999).Draw(t, "nsec")
		zone := time.FixedZone("z", rapid.IntRange(-12, 14).Draw(t, "zone")*3600)
		tm := time.Unix(sec, nsec).In(zone)
		got := appendTime(nil, tm)
		// CreateCertificate marshals the time in UTC; the encoder's
		// callers give it any zone and sub-seconds.
		want := mustMarshal(time.Unix(sec, 0).UTC())
		if !bytes.Equal(got, want) {
			t.Fatalf("%v: %q, want %q", tm, got, want)
		}
	})
}

func TestDERDirectoryStringsMatchEncodingASN1(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.OneOf(
			rapid.StringMatching(`[a-z0-9-]{1,63}`),
			rapid.StringMatching(`[ -~]{0,40}`), // any printable ASCII: '*', '&', '_' make a UTF8String
			rapid.String(),
		).Draw(t, "s")
		got, err := appendDirectoryString(nil, s)
		want, wantErr := asn1.Marshal(s)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: error %v, encoding/asn1's %v", s, err, wantErr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("%q: %x, want %x", s, got, want)
		}
	})
	if _, err := appendDirectoryString(nil, "bad\xff"); err == nil {
		t.Error("invalid UTF-8 encoded")
	}
}

// TestCertificatePEMMatchesEncodingPEM: the leaf's PEM is what
// pem.EncodeToMemory writes, for DER of every length around the 48-byte
// lines.
func TestCertificatePEMMatchesEncodingPEM(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		der := rapid.SliceOfN(rapid.Byte(), 0, 2000).Draw(t, "der")
		want := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		if got := (IssuedLeaf{DER: der}).PEM(); !bytes.Equal(got, want) {
			t.Fatalf("%d bytes:\n%s\nwant\n%s", len(der), got, want)
		}
	})
	for _, n := range []int{0, 1, 47, 48, 49, 95, 96, 97} {
		der := bytes.Repeat([]byte{0xa5}, n)
		if got, want := (IssuedLeaf{DER: der}).PEM(), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}); !bytes.Equal(got, want) {
			t.Errorf("%d bytes:\n%s\nwant\n%s", n, got, want)
		}
	}
}

func TestDERIA5RefusesNonASCII(t *testing.T) {
	if _, err := appendIA5(nil, tagDNSName, "wéb.svc"); err == nil {
		t.Error("a non-ASCII name encoded as IA5")
	}
	got, err := appendIA5(nil, tagURIName, "spiffe://td/x")
	if err != nil || !bytes.Equal(got, append([]byte{tagURIName, 13}, "spiffe://td/x"...)) {
		t.Errorf("appendIA5 = %x, %v", got, err)
	}
}
