package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"runtime"
	"sync"
	"time"

	"trellis.dev/trellis/internal/ca"
)

// request is one signing request of the run: a fresh key's CSR for a
// service id, sent once.
type request struct {
	id     ca.ServiceID
	pub    *ecdsa.PublicKey
	csrPEM string
}

// services is how many service names the requests cycle through.
const services = 1000

// newRequests makes n requests for services of trust domain td and
// datacenter dc, each with a new P-256 key, on every core, and returns
// them with the wall time and the CPU time (of this process) they took.
func newRequests(n int, td, dc string) ([]request, time.Duration, time.Duration, error) {
	cpu0 := selfCPU()
	start := time.Now()
	reqs := make([]request, n)
	workers := runtime.GOMAXPROCS(0)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				r, err := newRequest(ca.ServiceID{TrustDomain: td, Namespace: "bench", Datacenter: dc, Service: fmt.Sprintf("svc-%d", i%services)})
				if err != nil {
					errs[w] = err
					return
				}
				reqs[i] = r
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, 0, 0, err
		}
	}
	return reqs, time.Since(start), selfCPU() - cpu0, nil
}

// newRequest makes one request: a new P-256 key and its CSR naming id as
// its only URI SAN, as an agent asking for a service's leaf does.
func newRequest(id ca.ServiceID) (request, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return request{}, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{id.URI()}}, key)
	if err != nil {
		return request{}, err
	}
	return request{
		id:     id,
		pub:    &key.PublicKey,
		csrPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})),
	}, nil
}
