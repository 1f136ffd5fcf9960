package health

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHTTPProber(t *testing.T) {
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("fine")) })
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/broken", http.StatusFound)
	})
	mux.HandleFunc("/broken", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "database down", http.StatusInternalServerError)
	})
	mux.HandleFunc("/missing", http.NotFound)
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer close(release)

	tests := []struct {
		path     string
		wantPass bool
		wantOut  string
	}{
		{"/ok", true, "200 OK: fine"},
		// A redirect is the container's answer; following it would probe
		// something else.
		{"/moved", true, "302 Found"},
		{"/broken", false, "500 Internal Server Error: database down"},
		{"/missing", false, "404"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			r := probeOnce(context.Background(), Check{HTTP: srv.URL + tt.path, Timeout: 5 * time.Second}, NewHTTPProber(srv.URL+tt.path))
			if r.Pass != tt.wantPass || !strings.Contains(r.Output, tt.wantOut) {
				t.Fatalf("got %+v, want pass %v and output with %q", r, tt.wantPass, tt.wantOut)
			}
		})
	}

	t.Run("timeout", func(t *testing.T) {
		c := Check{HTTP: srv.URL + "/slow", Timeout: 100 * time.Millisecond}
		start := time.Now()
		r := probeOnce(context.Background(), c.WithDefaults(), NewHTTPProber(c.HTTP))
		if r.Pass || !strings.Contains(r.Output, "timed out") {
			t.Fatalf("got %+v, want a timeout failure", r)
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Fatalf("probe took %s, want about its 100ms timeout", el)
		}
	})

	t.Run("refused", func(t *testing.T) {
		addr := closedAddr(t)
		r := NewHTTPProber("http://" + addr + "/").Probe(context.Background())
		if r.Pass || !strings.Contains(r.Output, "refused") {
			t.Fatalf("got %+v, want connection refused", r)
		}
	})
}

func TestTCPProber(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if r := (TCPProber{Addr: ln.Addr().String()}).Probe(context.Background()); !r.Pass {
		t.Fatalf("listening port: got %+v, want pass", r)
	}
	addr := closedAddr(t)
	if r := (TCPProber{Addr: addr}).Probe(context.Background()); r.Pass || !strings.Contains(r.Output, "refused") {
		t.Fatalf("closed port: got %+v, want connection refused", r)
	}
}

func TestCommandProber(t *testing.T) {
	var got []string
	exec := func(ctx context.Context, cmd []string) (int, []byte, error) {
		got = cmd
		switch cmd[0] {
		case "ok":
			return 0, []byte("all good\n"), nil
		case "fail":
			return 2, []byte("not ready"), nil
		case "hang":
			<-ctx.Done()
			return -1, nil, ctx.Err()
		default:
			return -1, nil, errors.New("no such container")
		}
	}
	tests := []struct {
		cmd      string
		wantPass bool
		wantOut  string
	}{
		{"ok", true, "all good"},
		{"fail", false, "exit code 2: not ready"},
		{"hang", false, "timed out"},
		{"gone", false, "could not run: no such container"},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			c := Check{Command: []string{tt.cmd, "arg"}, Timeout: 50 * time.Millisecond}
			p, err := NewProber(c, exec, nil)
			if err != nil {
				t.Fatal(err)
			}
			r := probeOnce(context.Background(), c, p)
			if r.Pass != tt.wantPass || !strings.Contains(r.Output, tt.wantOut) {
				t.Fatalf("got %+v, want pass %v and output with %q", r, tt.wantPass, tt.wantOut)
			}
			if len(got) != 2 || got[1] != "arg" {
				t.Fatalf("exec got %q, want the whole command", got)
			}
		})
	}
	if _, err := NewProber(Check{Command: []string{"x"}}, nil, nil); err == nil {
		t.Fatal("a command check without an exec function was accepted")
	}
}

// closedAddr returns a local address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
