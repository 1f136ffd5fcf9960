package dns

import (
	"net/netip"
	"testing"

	miekg "github.com/miekg/dns"
)

// BenchmarkAnswer is the work of one query but the socket's: Answer over
// a service of 10 passing instances, truncated for UDP and packed, for A
// and SRV (the DNS benchmark asks >= 25,000 queries/s on one core
// for such a service).
func BenchmarkAnswer(b *testing.B) {
	cat := fakeCatalog{services: map[string][]Endpoint{}}
	for i := range 10 {
		cat.services["default/api"] = append(cat.services["default/api"], Endpoint{Name: "api", Addr: netip.AddrFrom4([4]byte{10, 1, 0, byte(i + 1)}), Port: uint16(8080 + i), Passing: true})
	}
	for _, qt := range []uint16{miekg.TypeA, miekg.TypeSRV} {
		b.Run(miekg.TypeToString[qt], func(b *testing.B) {
			q := query("api.service.default.trellis.", qt)
			buf := make([]byte, 0, 4096)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				r := Answer(q, cat, Options{Rotate: uint32(i)})
				r.Truncate(miekg.MinMsgSize)
				if _, err := r.PackBuffer(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
