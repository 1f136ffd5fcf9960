package catalogmodule_test

import (
	"context"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"

	"trellis.dev/trellis/internal/catalog"
)

// answersPerChange is issue 26's watchers of one service: each change of
// the service wakes that many blocking queries.
const answersPerChange = 1000

// BenchmarkConsulHealthAnswers is a server's CPU per answer of the
// blocking query GET /v1/health/service/db?passing&index=N, served by the
// HTTP handler without a network between: each change of db's check is
// followed by answersPerChange queries at the index before it, as
// issue 26's 1,000 watchers are. ns/op is the time of one answer, the
// change's own write left out; cpu-ns/op the process's CPU time (user
// and system, every thread: the garbage collector's too) per answer,
// which a loaded machine distorts less.
func BenchmarkConsulHealthAnswers(b *testing.B) {
	for _, instances := range []int{1, 100} {
		b.Run(strconv.Itoa(instances)+"-instances", func(b *testing.B) {
			h := newConsulHarness(b)
			for i := range instances {
				h.register(b, "default", "db-"+strconv.Itoa(i), "db", "10.0.0."+strconv.Itoa(i%250+1), 5432, "primary")
			}
			status := catalog.CheckPassing
			flip := func() uint64 {
				if status == catalog.CheckPassing {
					status = catalog.CheckCritical
				} else {
					status = catalog.CheckPassing
				}
				var at uint64
				for i := range instances {
					at = h.setCheck(b, "default", "db-"+strconv.Itoa(i), status)
				}
				// Applied, and so seen by the service's index, before
				// the answers are timed.
				if err := h.in.WaitIndex(context.Background(), catalog.ServiceInstanceType, at); err != nil {
					b.Fatal(err)
				}
				return at
			}
			before := flip()
			path, w := "", &countingWriter{}
			var cpu time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i%answersPerChange == 0 {
					b.StopTimer()
					if i > 0 {
						cpu += cpuTime(b)
					}
					path = "/v1/health/service/db?passing&index=" + strconv.FormatUint(before, 10)
					before = flip()
					cpu -= cpuTime(b)
					b.StartTimer()
				}
				req, err := http.NewRequest(http.MethodGet, path, nil)
				if err != nil {
					b.Fatal(err)
				}
				req.Header.Set("X-Consul-Token", "reader")
				w.reset()
				h.handler.ServeHTTP(w, req)
				if w.code != http.StatusOK || w.written == 0 {
					b.Fatalf("GET %s = %d, %d bytes", path, w.code, w.written)
				}
			}
			b.StopTimer()
			cpu += cpuTime(b)
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// countingWriter is a client that reads an answer's status and counts its
// bytes, as cheaply as it can: what the benchmark measures is the
// server's.
type countingWriter struct {
	header  http.Header
	code    int
	written int
}

func (w *countingWriter) reset() { w.header, w.code, w.written = http.Header{}, 0, 0 }

func (w *countingWriter) Header() http.Header { return w.header }

func (w *countingWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *countingWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.written += len(b)
	return len(b), nil
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
