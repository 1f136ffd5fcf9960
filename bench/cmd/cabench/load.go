package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pbca "trellis.dev/trellis/api/ca/v1"
	"trellis.dev/trellis/bench/internal/caroots"
	"trellis.dev/trellis/bench/internal/machine"
	"trellis.dev/trellis/internal/ca/camodule"
	"trellis.dev/trellis/internal/testcluster"
)

// signResult is what the signing cell measured.
type signResult struct {
	servers, clients int
	trustDomain      string
	datacenter       string

	csrs            int
	csrWall, csrCPU time.Duration
	elapsed         time.Duration // of the timed phase
	ranOut          bool          // the CSRs ran out before -duration
	signed          int
	latencies       []time.Duration // sorted
	rateLimited     int
	refused         map[codes.Code]int
	firstRefusal    string
	serverCPU       []time.Duration // each server's, over the timed phase
	clientCPU       time.Duration
	machineBusy     float64 // cores busy on the machine over the timed phase, everything counted
	// cpuWindow is what the CPU figures were read over: the timed phase,
	// or less when the clients ran out of CSRs before its end.
	cpuWindow          time.Duration
	loadStart, loadEnd string

	verified  int
	verifyErr error

	ceiling ceiling
}

// sample is a leaf kept to be verified, with the request it answers.
type sample struct {
	req  *request
	resp *pbca.SignResponse
}

func (b *bench) signCell(ctx context.Context) (*signResult, error) {
	r := &signResult{servers: b.servers, clients: b.clients, refused: map[codes.Code]int{}}
	extra := []string{"-enable-debug", "-log-level", "warn"}
	creds := insecure.NewCredentials()
	if !b.plaintext {
		flags, tc, err := b.makeTLS()
		if err != nil {
			return nil, err
		}
		extra = append(extra, flags...)
		creds = credentials.NewTLS(tc)
	}
	extra = append(extra, b.serverFlags...)
	fmt.Fprintf(b.progress, "cabench: starting %d servers\n", b.servers)
	c, err := testcluster.Start(ctx, testcluster.Options{Bin: b.trellis, Dir: b.dir, Servers: b.servers, Extra: extra})
	if err != nil {
		return nil, err
	}
	defer c.Stop()

	conns := make([]*grpc.ClientConn, len(c.Members))
	for i, m := range c.Members {
		conn, err := grpc.NewClient(m.GRPCAddr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		conns[i] = conn
	}
	roots, err := waitCA(ctx, c.Members, conns)
	if err != nil {
		return nil, err
	}
	r.trustDomain, r.datacenter = roots.TrustDomain, roots.Datacenter

	fmt.Fprintf(b.progress, "cabench: generating %d keys and CSRs\n", b.csrs)
	reqs, wall, cpu, err := newRequests(b.csrs, roots.TrustDomain, roots.Datacenter)
	if err != nil {
		return nil, fmt.Errorf("generate CSRs: %w", err)
	}
	r.csrs, r.csrWall, r.csrCPU = len(reqs), wall, cpu

	fmt.Fprintf(b.progress, "cabench: %d clients over %d servers, %s warm-up, %s timed\n", b.clients, b.servers, b.warmup, b.duration)
	samples, err := b.drive(ctx, c.Members, conns, reqs, r)
	if err != nil {
		return nil, err
	}

	fmt.Fprintf(b.progress, "cabench: verifying %d leaves\n", len(samples))
	r.verified, r.verifyErr = verifySamples(c.Members, samples)

	return r, nil
}

// drive runs the clients over reqs: a warm-up, then the timed phase,
// whose figures go to r. It returns the leaves kept for verification.
func (b *bench) drive(ctx context.Context, members []*testcluster.Member, conns []*grpc.ClientConn, reqs []request, r *signResult) ([]sample, error) {
	var next atomic.Int64
	start := time.Now()
	t0 := start.Add(b.warmup)
	t1 := t0.Add(b.duration)
	var (
		mu        sync.Mutex
		latencies []time.Duration
		samples   []sample
		lastDone  time.Time
	)
	var wg sync.WaitGroup
	for cl := range b.clients {
		client := pbca.NewCAServiceClient(conns[cl%len(conns)])
		wg.Add(1)
		go func() {
			defer wg.Done()
			var (
				lat               []time.Duration
				kept              []sample
				limited, refusals int
				refusedBy         = map[codes.Code]int{}
				firstRefusal      string
				signed            int
				lastEnd           time.Time
			)
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(len(reqs)) {
					break
				}
				req := &reqs[i]
				begin := time.Now()
				if !begin.Before(t1) {
					break
				}
				resp, err := client.Sign(ctx, &pbca.SignRequest{CsrPem: req.csrPEM})
				end := time.Now()
				timed := !begin.Before(t0)
				if err == nil && i%int64(b.verifyEvery) == 0 {
					kept = append(kept, sample{req: req, resp: resp})
				}
				if !timed {
					continue
				}
				lastEnd = end
				switch code := status.Code(err); {
				case err == nil:
					signed++
					lat = append(lat, end.Sub(begin))
				case code == codes.ResourceExhausted:
					limited++
				case ctx.Err() != nil:
				default:
					refusals++
					refusedBy[code]++
					if firstRefusal == "" {
						firstRefusal = err.Error()
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			latencies = append(latencies, lat...)
			samples = append(samples, kept...)
			r.signed += signed
			r.rateLimited += limited
			for c, n := range refusedBy {
				r.refused[c] += n
			}
			if r.firstRefusal == "" {
				r.firstRefusal = firstRefusal
			}
			if lastEnd.After(lastDone) {
				lastDone = lastEnd
			}
		}()
	}

	// The CPU of the servers, of this process and of the machine, read
	// at the start and the end of the timed phase.
	measured := make(chan error, 1)
	clientsDone := make(chan struct{})
	go func() {
		measured <- b.measureCPU(ctx, members, t0, t1, clientsDone, r)
	}()
	wg.Wait()
	close(clientsDone)
	if err := <-measured; err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	r.elapsed = b.duration
	if next.Load() >= int64(len(reqs)) {
		r.ranOut = true
		r.elapsed = lastDone.Sub(t0)
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	r.latencies = latencies
	return samples, nil
}

// measureCPU reads the CPU time of every server, of this process and of
// the machine at t0 and at t1 (or when the clients are done, whichever
// comes first), fetching profiles of the timed phase when asked.
func (b *bench) measureCPU(ctx context.Context, members []*testcluster.Member, t0, t1 time.Time, clientsDone <-chan struct{}, r *signResult) error {
	read := func() ([]time.Duration, time.Duration, time.Duration, error) {
		var cpus []time.Duration
		for _, m := range members {
			c, err := testcluster.CPUTime(m.PID())
			if err != nil {
				return nil, 0, 0, err
			}
			cpus = append(cpus, c)
		}
		busy, err := machine.BusyTime()
		return cpus, selfCPU(), busy, err
	}
	if !sleepUntil(ctx, t0) {
		return nil
	}
	r.loadStart = testcluster.LoadAvg()
	s0, c0, m0, err := read()
	if err != nil {
		return err
	}
	var profiles sync.WaitGroup
	if b.profile {
		for i, m := range members {
			profiles.Add(1)
			go func() {
				defer profiles.Done()
				b.fetchProfile(ctx, m.HTTPAddr, filepath.Join(b.dir, fmt.Sprintf("server%d.pprof", i)))
			}()
		}
	}
	select {
	case <-ctx.Done():
	case <-clientsDone:
	case <-time.After(time.Until(t1)):
	}
	s1, c1, m1, err := read()
	if err != nil {
		return err
	}
	r.cpuWindow = time.Since(t0)
	r.loadEnd = testcluster.LoadAvg()
	for i := range s0 {
		r.serverCPU = append(r.serverCPU, s1[i]-s0[i])
	}
	r.clientCPU = c1 - c0
	r.machineBusy = (m1 - m0).Seconds() / r.cpuWindow.Seconds()
	profiles.Wait()
	return nil
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Until(t)):
		return true
	}
}

// fetchProfile saves a CPU profile of the timed phase of the server at
// httpAddr to path.
func (b *bench) fetchProfile(ctx context.Context, httpAddr, path string) {
	u := fmt.Sprintf("http://%s/v1/debug/pprof/profile?seconds=%d", httpAddr, max(1, int(b.duration.Seconds())))
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(b.progress, "cabench: profile of %s: %v\n", httpAddr, err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(b.progress, "cabench: profile: %v\n", err)
		return
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		fmt.Fprintf(b.progress, "cabench: profile of %s: %v\n", httpAddr, err)
		return
	}
	fmt.Fprintf(b.progress, "cabench: profile %s\n", path)
}

// waitCA waits until every server publishes the same active root and
// signs a leaf (a throwaway CSR each, before the timed phase), and
// returns the roots.
func waitCA(ctx context.Context, members []*testcluster.Member, conns []*grpc.ClientConn) (*camodule.RootsBody, error) {
	var roots *camodule.RootsBody
	var last error
	err := testcluster.WaitFor(ctx, 60*time.Second, func() bool {
		roots, last = caroots.Agreed(members)
		return last == nil
	})
	if err != nil {
		return nil, fmt.Errorf("the CA has no active root on every server: %v (logs beside %s)", last, members[0].LogPath)
	}
	for i, conn := range conns {
		err := testcluster.WaitFor(ctx, 60*time.Second, func() bool {
			req, err := newRequest(probeID(roots))
			if err != nil {
				last = err
				return false
			}
			_, last = pbca.NewCAServiceClient(conn).Sign(ctx, &pbca.SignRequest{CsrPem: req.csrPEM})
			return last == nil
		})
		if err != nil {
			return nil, fmt.Errorf("server%d signs nothing: %v", i, last)
		}
	}
	return roots, nil
}
