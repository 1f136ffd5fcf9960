package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pbproxy "trellis.dev/trellis/api/proxy/v1"
)

// The admin port (127.0.0.1:19000 in a task's namespace, the snapshot's
// admin_address): /ready for the agent's lifecycle (the app starts once
// the proxy is ready), /stats for Prometheus, /config for a person.

const adminComponent = "admin"

func init() {
	components = append(components, component{name: adminComponent, run: runAdmin})
}

// runAdmin serves the admin port at the snapshot's admin_address
// (AdminAddr when empty), moving when a snapshot changes it.
func runAdmin(ctx context.Context, p *Proxy) error {
	srv := &http.Server{Handler: p.AdminHandler(), ReadHeaderTimeout: 10 * time.Second}
	var ln net.Listener
	var addr string
	defer func() {
		if ln != nil {
			p.setListening(adminComponent, nil)
		}
		shutdown, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	for {
		changed := p.changed()
		want := AdminAddr
		if st := p.state.Load(); st != nil && st.snap.GetAdminAddress() != "" {
			want = st.snap.GetAdminAddress()
		}
		if want != addr {
			if ln != nil {
				ln.Close() // Serve returns; connections in flight finish
				p.setListening(adminComponent, nil)
				ln = nil
			}
			l, err := net.Listen("tcp", want)
			if err != nil {
				p.log.Warn("proxy: cannot listen for the admin port", "address", want, "err", err)
			} else {
				ln, addr = l, want
				p.setListening(adminComponent, l.Addr())
				go func() {
					if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
						p.log.Warn("proxy: admin port", "err", err)
					}
				}()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// AdminHandler serves /ready, /stats and /config.
func (p *Proxy) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if missing := p.notReady(); len(missing) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", strings.Join(missing, "; "))
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /stats", promhttp.HandlerFor(p.stats.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /config", func(w http.ResponseWriter, r *http.Request) {
		snap := p.Snapshot()
		if snap == nil {
			http.Error(w, "no snapshot yet", http.StatusServiceUnavailable)
			return
		}
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(withoutKey(snap))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(append(b, '\n'))
	})
	return mux
}

// withoutKey is a copy of snap without the leaf's private key.
func withoutKey(snap *pbproxy.Snapshot) *pbproxy.Snapshot {
	c := proto.Clone(snap).(*pbproxy.Snapshot)
	if c.GetCertificates() != nil {
		c.Certificates.KeyPem = nil
	}
	return c
}

// notReady lists what keeps the proxy from being ready: a snapshot (with
// its leaf and roots, which Update checks) and every listener the
// snapshot asks for. Empty when ready.
func (p *Proxy) notReady() []string {
	st := p.state.Load()
	if st == nil {
		return []string{"no snapshot yet"}
	}
	var missing []string
	if st.snap.GetInbound() != nil && p.Addr("inbound") == nil {
		missing = append(missing, "the inbound listener is not up")
	}
	for _, u := range st.snap.GetUpstreams() {
		if p.Addr(upstreamComponent(u)) == nil {
			missing = append(missing, fmt.Sprintf("the listener of upstream %s/%s (%s) is not up", u.GetNamespace(), u.GetService(), u.GetBindAddress()))
		}
	}
	if out := st.snap.GetOutbound(); out != nil && p.Addr(outboundComponent) == nil {
		missing = append(missing, fmt.Sprintf("the transparent outbound listener (%s) is not up", out.GetAddress()))
	}
	return missing
}
