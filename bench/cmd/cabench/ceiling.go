package main

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"trellis.dev/trellis/internal/ca"
)

// ceiling is what this machine signs in this process, with no RPC: the
// rate a cluster's signatures cannot pass.
type ceiling struct {
	// signerOne and signerAll are leaves per second of the signer's own
	// work per request (parse and check the CSR, sign the leaf with the
	// leaf encoder, encode it in PEM: what camodule.Signer.Sign does), on
	// one core and on all cores.
	signerOne, signerAll float64
	// issueOne is the leaf encoder alone (ca.LeafIssuer.Issue) per second
	// on one core: one ECDSA P-256 signature and the DER around it.
	issueOne float64
	// createOne is x509.CreateCertificate alone per second on one core:
	// one ECDSA P-256 signature and the check of it Go makes, which is
	// what the signer used before the leaf encoder.
	createOne float64
	// signerCPU, issueCPU and createCPU are the CPU time this process
	// spent per leaf in signerOne, issueOne and createOne: unlike the
	// rates, the machine's other load hardly moves them.
	signerCPU, issueCPU, createCPU time.Duration
	cores                          int
}

// serialLimit is 2^128, the leaves' serials are drawn below it.
var serialLimit = new(big.Int).Lsh(big.NewInt(1), 128)

// ceilingCSRs is how many distinct CSRs the ceiling cycles through.
const ceilingCSRs = 256

// measureCeiling measures the ceiling for leaves of trust domain td and
// datacenter dc, each figure over d.
func measureCeiling(d time.Duration, td, dc string) (ceiling, error) {
	now := time.Now()
	cert, key, err := ca.NewRoot(ca.RootOptions{TrustDomain: td, Now: now})
	if err != nil {
		return ceiling{}, err
	}
	issuer, err := ca.NewLeafIssuer(ca.Signer{Cert: cert, Key: key})
	if err != nil {
		return ceiling{}, err
	}
	reqs, _, _, err := newRequests(ceilingCSRs, td, dc)
	if err != nil {
		return ceiling{}, err
	}
	policy := ca.CSRPolicy{TrustDomain: td, Datacenter: dc}
	signOne := func(i int) error {
		csr, err := ca.ParseCSR([]byte(reqs[i%len(reqs)].csrPEM))
		if err != nil {
			return err
		}
		id, err := ca.CheckCSR(csr, policy)
		if err != nil {
			return err
		}
		leaf, err := issuer.Issue(csr, id, ca.DefaultLeafTTL, now)
		if err != nil {
			return err
		}
		_ = leaf.PEM()
		return nil
	}
	c := ceiling{cores: runtime.GOMAXPROCS(0)}
	if c.signerOne, c.signerCPU, err = rate(d, 1, signOne); err != nil {
		return c, err
	}
	if c.signerAll, _, err = rate(d, c.cores, signOne); err != nil {
		return c, err
	}
	// The leaf encoder alone needs a parsed CSR, as the x509 template
	// below needs only the key: parse them before, not in, the loop.
	csrs := make([]*x509.CertificateRequest, len(reqs))
	for i := range reqs {
		if csrs[i], err = ca.ParseCSR([]byte(reqs[i].csrPEM)); err != nil {
			return c, err
		}
	}
	if c.issueOne, c.issueCPU, err = rate(d, 1, func(i int) error {
		_, err := issuer.Issue(csrs[i%len(csrs)], reqs[i%len(reqs)].id, ca.DefaultLeafTTL, now)
		return err
	}); err != nil {
		return c, err
	}
	c.createOne, c.createCPU, err = rate(d, 1, func(i int) error {
		r := &reqs[i%len(reqs)]
		serial, err := rand.Int(rand.Reader, serialLimit)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial, Subject: pkix.Name{CommonName: r.id.Service},
			NotBefore: now.Add(-time.Minute), NotAfter: now.Add(ca.DefaultLeafTTL),
			KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			BasicConstraintsValid: true,
			URIs:                  []*url.URL{r.id.URI()}, DNSNames: []string{r.id.DNSName()},
		}
		_, err = x509.CreateCertificate(rand.Reader, tmpl, cert, r.pub, key)
		return err
	})
	return c, err
}

// ceilingRounds is how many times each ceiling is measured; the best
// round is kept, as the machine's other load only ever slows one down.
const ceilingRounds = 3

// rate measures op on workers goroutines for d, ceilingRounds times, and
// returns the best round's ops per second and the least CPU time of
// this process per op among them.
func rate(d time.Duration, workers int, op func(i int) error) (float64, time.Duration, error) {
	var best float64
	var bestCPU time.Duration
	for range ceilingRounds {
		r, cpu, err := rateOnce(d, workers, op)
		if err != nil {
			return 0, 0, err
		}
		best = max(best, r)
		if bestCPU == 0 || cpu < bestCPU {
			bestCPU = cpu
		}
	}
	return best, bestCPU, nil
}

// rateOnce runs op on workers goroutines for d and returns how many per
// second completed, and the CPU time of this process per op.
func rateOnce(d time.Duration, workers int, op func(i int) error) (float64, time.Duration, error) {
	cpu0 := selfCPU()
	var n atomic.Int64
	var first atomic.Pointer[error]
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(deadline); i += workers {
				if err := op(i); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), selfCPU()-cpu0
	if e := first.Load(); e != nil {
		return 0, 0, *e
	}
	ops := n.Load()
	return float64(ops) / elapsed.Seconds(), cpu / time.Duration(max(1, ops)), nil
}
