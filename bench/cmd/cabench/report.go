package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"trellis.dev/trellis/bench/internal/report"
)

// reportSign prints the signing cell; false when the run must fail (a
// refusal, or a kept leaf that does not verify).
func (b *bench) reportSign(r *signResult) bool {
	ok := true
	w := b.out
	perSec := float64(r.signed) / r.elapsed.Seconds()
	fmt.Fprintf(w, "## Connect CA: leaf signatures\n\n")
	transport := "TLS 1.3, the servers' certificates from `trellis tls`"
	if b.plaintext {
		transport = "plaintext (-plaintext)"
	}
	fmt.Fprintf(w, "%d servers, %d clients spread round-robin over them (one gRPC connection per server, %s), `CAService.Sign`, "+
		"each request a fresh P-256 CSR for a service of trust domain `%s`, datacenter `%s`; %s timed after a %s warm-up. "+
		"Load average %s at the start of the timed phase, %s at its end.\n\n",
		r.servers, r.clients, transport, r.trustDomain, r.datacenter, report.Round(r.elapsed), b.warmup, r.loadStart, r.loadEnd)
	if r.ranOut {
		fmt.Fprintf(w, "The %d CSRs ran out after %s of the timed phase: raise -csrs.\n\n", r.csrs, report.Round(r.elapsed))
	}
	fmt.Fprintf(w, "| signatures/s | p50 | p99 | signed | rate-limited | refused |\n|---|---|---|---|---|---|\n")
	fmt.Fprintf(w, "| **%s** | %s | %s | %d | %d | %d |\n\n", thousands(perSec),
		report.Round(quantile(r.latencies, 0.50)), report.Round(quantile(r.latencies, 0.99)),
		r.signed, r.rateLimited, total(r.refused))
	if n := total(r.refused); n > 0 {
		ok = false
		var by []string
		for c, k := range r.refused {
			by = append(by, fmt.Sprintf("%s %d", c, k))
		}
		sort.Strings(by)
		fmt.Fprintf(w, "**Refused: %s; the first: %s**\n\n", strings.Join(by, ", "), r.firstRefusal)
	}
	if r.rateLimited > 0 {
		fmt.Fprintf(w, "**%d requests were rate-limited: at the default limits there should be none.**\n\n", r.rateLimited)
	}

	secs := r.cpuWindow.Seconds()
	var serverTotal time.Duration
	var each []string
	for _, c := range r.serverCPU {
		serverTotal += c
		each = append(each, fmt.Sprintf("%.2f", c.Seconds()/secs))
	}
	fmt.Fprintf(w, "| CPU over the timed phase | cores | per signature |\n|---|---|---|\n")
	fmt.Fprintf(w, "| servers (%s) | %.2f | %s |\n", strings.Join(each, " + "), serverTotal.Seconds()/secs, perSig(serverTotal, r.signed))
	fmt.Fprintf(w, "| the client (this process) | %.2f | %s |\n", r.clientCPU.Seconds()/secs, perSig(r.clientCPU, r.signed))
	fmt.Fprintf(w, "| the whole machine, everything on it | %.2f of %d | |\n\n", r.machineBusy, r.ceiling.cores)
	if others := r.machineBusy - serverTotal.Seconds()/secs - r.clientCPU.Seconds()/secs; others > quietShare {
		fmt.Fprintf(w, "**The machine was not quiet: other processes took %.2f cores during the timed phase.** "+
			"These figures are not of record; measure again on a quiet machine.\n\n", others)
	}

	fmt.Fprintf(w, "The client's own cost, apart: %d P-256 keys and CSRs generated before the timed phase in %s (%s of CPU, %s each).\n\n",
		r.csrs, report.Round(r.csrWall), report.Round(r.csrCPU), report.Round(r.csrCPU/time.Duration(max(1, r.csrs))))

	c := r.ceiling
	fmt.Fprintf(w, "The ceiling, in this process, same run, no RPC (measured after the cluster stopped; the best of %d rounds of %s each):\n\n", ceilingRounds, b.ceilingTime)
	fmt.Fprintf(w, "| work per leaf | 1 core | CPU per leaf | all %d cores |\n|---|---|---|---|\n", c.cores)
	fmt.Fprintf(w, "| the signer's: parse and check the CSR (its signature verified), sign the leaf with the leaf encoder, encode it in PEM | %s/s | %s | %s/s |\n",
		thousands(c.signerOne), report.Round(c.signerCPU), thousands(c.signerAll))
	fmt.Fprintf(w, "| the leaf encoder alone (`ca.LeafIssuer.Issue`: an ECDSA P-256 signature and the DER) | %s/s | %s | |\n",
		thousands(c.issueOne), report.Round(c.issueCPU))
	fmt.Fprintf(w, "| `x509.CreateCertificate` alone (an ECDSA P-256 signature, and Go's check of it), what the signer used before | %s/s | %s | |\n\n",
		thousands(c.createOne), report.Round(c.createCPU))
	if c.signerAll > 0 {
		fmt.Fprintf(w, "The cluster signs at **%.2f×** the all-cores ceiling of this run.\n\n", perSec/c.signerAll)
	}
	if r.signed > 0 {
		server := serverTotal / time.Duration(r.signed)
		client := r.clientCPU / time.Duration(r.signed)
		fmt.Fprintf(w, "Per signature the servers spent %s of CPU, of which the signer's own work is %s in-process "+
			"(the rest: gRPC and protobuf, the interceptors and the limiter, the runtime's scheduling and garbage collection); the client %s. "+
			"At those costs, %d otherwise idle cores would sign about %s/s (servers and client) or %s/s (servers alone): a projection, "+
			"not a measurement, and CPU per signature on this busy machine is itself higher than on a quiet one.\n\n",
			report.Round(server), report.Round(c.signerCPU), report.Round(client), c.cores,
			thousands(float64(c.cores)/(server+client).Seconds()), thousands(float64(c.cores)/server.Seconds()))
	}

	if r.verifyErr != nil {
		ok = false
		fmt.Fprintf(w, "**Verification failed after %d leaves: %v**\n\n", r.verified, r.verifyErr)
	} else {
		fmt.Fprintf(w, "Verified: %d leaves (every %dth request), each with its chain against the roots the servers publish, "+
			"for server and client authentication, naming its CSR's SPIFFE id and holding its CSR's key.\n\n", r.verified, b.verifyEvery)
	}
	verdict := "met"
	if perSec < target {
		verdict = "**not met**"
	}
	fmt.Fprintf(w, "Target ≥ %s signatures/s on %d servers: %s (%s/s).\n\n", thousands(target), r.servers, verdict, thousands(perSec))
	return ok
}

// quietShare is the CPU, in cores, that processes other than the
// servers and the client may take during the timed phase of a run whose
// figures are of record.
const quietShare = 0.2

func total(m map[codes.Code]int) int {
	n := 0
	for _, k := range m {
		n += k
	}
	return n
}

// quantile is the q-quantile of sorted durations (0 for none).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

func perSig(cpu time.Duration, n int) string {
	if n == 0 {
		return "–"
	}
	return report.Round(cpu / time.Duration(n)).String()
}

// thousands formats a rate as an integer with thousands separators.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
