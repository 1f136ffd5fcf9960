package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"trellis.dev/trellis/internal/httpapi/wire"
)

func TestNew(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "http://127.0.0.1:7700"},
		{"127.0.0.1:8500", "http://127.0.0.1:8500"},
		{"https://trellis.example/", "https://trellis.example"},
		{"http://h:1/prefix/", "http://h:1/prefix"},
	} {
		c, err := New(tc.in)
		if err != nil || c.Addr() != tc.want {
			t.Errorf("New(%q) = %v, %v; want %s", tc.in, c, err, tc.want)
		}
	}
	for _, bad := range []string{"ftp://h", "http://", "http://h:1:2:3/%zz"} {
		if _, err := New(bad); !errors.Is(err, ErrBadAddr) {
			t.Errorf("New(%q) = %v, want ErrBadAddr", bad, err)
		}
	}
}

func TestResourceURL(t *testing.T) {
	c, _ := New("http://h:1/base")
	typ := wire.Type{Group: "core", GroupVersion: "v1", Kind: "Namespace"}
	got := c.resourceURL(typ, "a b/c", url.Values{"namespace": {"x&y"}})
	if want := "http://h:1/base/v1/resources/core/v1/Namespace/a%20b%2Fc?namespace=x%26y"; got != want {
		t.Fatalf("resourceURL = %s, want %s", got, want)
	}
}

// A response that is not the API's (a proxy's error page) still becomes an
// APIError with its status and body.
func TestNonAPIErrorBody(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Trellis-Token") != "tok" {
			t.Errorf("token header %q", r.Header.Get("X-Trellis-Token"))
		}
		http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
	}))
	defer proxy.Close()
	c, _ := New(proxy.URL, WithToken("tok"))
	_, err := c.List(context.Background(), wire.Type{Group: "core", GroupVersion: "v1", Kind: "Namespace"}, ListOptions{})
	var ae *APIError
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadGateway || ae.Code != "" {
		t.Fatalf("err = %#v", err)
	}
	if want := "GET " + proxy.URL + "/v1/resources/core/v1/Namespace: HTTP 502: <html>bad gateway</html>"; ae.Message != want {
		t.Fatalf("message %q, want %q", ae.Message, want)
	}
}

// WithTransportErrors words the requests that got no answer, whichever
// call made them, and nothing else: the server's own answers pass as they
// are.
func TestWithTransportErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"no","code":"not_found"}`, http.StatusNotFound)
	}))
	gone := errors.New("no answer")
	word := WithTransportErrors(func(err error) error { return fmt.Errorf("%w: %v", gone, err) })
	c, _ := New(srv.URL, word)
	ctx := context.Background()
	if _, err := c.Read(ctx, Ref{Type: wire.Type{Group: "core", GroupVersion: "v1", Kind: "Namespace"}, Name: "a"}, false); !IsCode(err, "not_found") || errors.Is(err, gone) {
		t.Fatalf("an answer: %v", err)
	}
	srv.Close() // nothing answers now
	for name, call := range map[string]func() error{
		"read":    func() error { _, err := c.RaftPeers(ctx); return err },
		"restore": func() error { return c.RestoreSnapshot(ctx, strings.NewReader("x")) },
		"watch": func() error {
			_, err := c.Watch(ctx, wire.Type{Group: "core", GroupVersion: "v1", Kind: "Namespace"}, ListOptions{})
			return err
		},
	} {
		if err := call(); !errors.Is(err, gone) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
