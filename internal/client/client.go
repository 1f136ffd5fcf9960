// Package client is a Go client of Trellis's HTTP API (package httpapi),
// used by the CLI and by tests and benchmarks that drive a server from
// outside. It speaks only the public JSON API and its shapes (package
// wire), nothing internal.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"trellis.dev/trellis/internal/httpapi/wire"
)

// DefaultAddr is where a server listens unless told otherwise.
const DefaultAddr = "http://127.0.0.1:7700"

// Client talks to one server's HTTP API.
type Client struct {
	base      *url.URL
	token     string
	http      *http.Client
	transport func(error) error // words the errors of requests that got no answer
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends token as the caller's ACL token.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient uses hc instead of a default client (which has no
// timeout, since watches are long requests: use contexts for deadlines).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithTransportErrors has every error of a request that got no answer
// (the server cannot be reached, the connection broke) passed through
// word, so that a command line can say what to do about it in one place,
// whichever call failed. The server's own answers (*APIError) are not
// passed.
func WithTransportErrors(word func(error) error) Option {
	return func(c *Client) { c.transport = word }
}

// ErrBadAddr is wrapped when the server address cannot be used.
var ErrBadAddr = errors.New("bad server address")

// New returns a client of the server at addr ("http://host:port"; a bare
// "host:port" means http).
func New(addr string, opts ...Option) (*Client, error) {
	if addr == "" {
		addr = DefaultAddr
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrBadAddr, addr, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w %q: the scheme must be http or https", ErrBadAddr, addr)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w %q: no host", ErrBadAddr, addr)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	c := &Client{base: u, http: http.DefaultClient, transport: func(err error) error { return err }}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Addr returns the server's base URL.
func (c *Client) Addr() string { return c.base.String() }

// APIError is an error response of the server.
type APIError struct {
	StatusCode int    // the HTTP status
	Code       string // wire.Code*
	Message    string
}

func (e *APIError) Error() string { return e.Message }

// IsCode reports whether err is an APIError with that code.
func IsCode(err error, code string) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == code
}

// Ref names one resource.
type Ref struct {
	Type      wire.Type
	Namespace string // "" for cluster-scoped types, or the default namespace
	Name      string
}

func (c *Client) resourceURL(typ wire.Type, name string, q url.Values) string {
	p := "/v1/resources/" + url.PathEscape(typ.Group) + "/" + url.PathEscape(typ.GroupVersion) + "/" + url.PathEscape(typ.Kind)
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return c.pathURL(p) + encodeQuery(q)
}

// pathURL joins an already-escaped path to the base URL.
func (c *Client) pathURL(p string) string {
	u := *c.base
	u.RawQuery, u.Fragment = "", ""
	return u.String() + p
}

func encodeQuery(q url.Values) string {
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// URL is the address of an API path, already escaped
// ("/v1/environments/web"), with its query: what Do is given to call a
// domain's own operations.
func (c *Client) URL(path string, query url.Values) string {
	return c.pathURL(path) + encodeQuery(query)
}

// Do sends a request to url (made by URL) with body as JSON, and decodes a
// 200 response's JSON into out (when out is not nil); any other status
// becomes an *APIError. A domain's client calls its operations with it
// (the scheduler's is in internal/scheduler/command).
func (c *Client) Do(ctx context.Context, method, url string, body, out any) error {
	return c.do(ctx, method, url, body, out)
}

// Open GETs url (made by URL) and returns the body of a 200 response as
// it comes, for a route that streams text (a task's logs); the caller
// closes it. Any other status becomes an *APIError.
func (c *Client) Open(ctx context.Context, url string) (io.ReadCloser, error) {
	resp, err := c.send(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// IndexHeader is the header in which a blocking read answers the store
// index its answer is as of (GET /v1/ca/roots).
const IndexHeader = "X-Trellis-Index"

// DoIndexed is Do for a blocking read: it also returns the answer's
// IndexHeader, 0 when it has none, to pass as ?index= to the next read.
func (c *Client) DoIndexed(ctx context.Context, method, url string, body, out any) (uint64, error) {
	resp, err := c.send(ctx, method, url, body)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	index, _ := strconv.ParseUint(resp.Header.Get(IndexHeader), 10, 64)
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return index, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return 0, fmt.Errorf("decoding the response of %s %s: %w", method, url, err)
	}
	return index, nil
}

// MarshalProto is the JSON the API uses for a message: protobuf JSON with
// the proto field names.
func MarshalProto(m proto.Message) ([]byte, error) {
	return protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
}

// do sends a request and decodes a 200 response's JSON into out (when out
// is not nil); any other status becomes an *APIError.
func (c *Client) do(ctx context.Context, method, url string, body any, out any) error {
	resp, err := c.send(ctx, method, url, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decoding the response of %s %s: %w", method, url, err)
	}
	return nil
}

// send sends a request and returns a 200 response, or the error the server
// gave.
func (c *Client) send(ctx context.Context, method, url string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("X-Trellis-Token", c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.transport(err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var e wire.Error
	if json.Unmarshal(b, &e) != nil || e.Error == "" {
		e = wire.Error{Error: fmt.Sprintf("%s %s: HTTP %d: %s", method, url, resp.StatusCode, strings.TrimSpace(string(b)))}
	}
	return nil, &APIError{StatusCode: resp.StatusCode, Code: e.Code, Message: e.Error}
}

// Write creates or updates a resource. A non-empty w.Version makes it a
// compare-and-swap.
func (c *Client) Write(ctx context.Context, ref Ref, w wire.WriteRequest) (*wire.Resource, error) {
	var out wire.Resource
	if err := c.do(ctx, http.MethodPut, c.resourceURL(ref.Type, ref.Name, nsQuery(ref.Namespace)), w, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Apply writes one document (its type, name and namespace are in it).
func (c *Client) Apply(ctx context.Context, doc wire.Document) (*wire.Resource, error) {
	typ, err := wire.ParseType(doc.Type)
	if err != nil {
		return nil, err
	}
	return c.Write(ctx, Ref{Type: typ, Namespace: doc.Namespace, Name: doc.Name}, wire.WriteRequest{
		Data: doc.Data, Metadata: doc.Metadata, Version: doc.Version, Owner: doc.Owner,
	})
}

// WriteBatch writes every document atomically.
func (c *Client) WriteBatch(ctx context.Context, docs []wire.Document) ([]*wire.Resource, error) {
	var out wire.ListResponse
	if err := c.do(ctx, http.MethodPut, c.pathURL("/v1/batch"), wire.BatchRequest{Resources: docs}, &out); err != nil {
		return nil, err
	}
	return out.Resources, nil
}

// Read returns a resource; consistent asks for a strong read.
func (c *Client) Read(ctx context.Context, ref Ref, consistent bool) (*wire.Resource, error) {
	q := nsQuery(ref.Namespace)
	if consistent {
		q.Set("consistent", "1")
	}
	var out wire.Resource
	if err := c.do(ctx, http.MethodGet, c.resourceURL(ref.Type, ref.Name, q), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Delete deletes a resource; deleting what is not there is not an error. A
// non-empty version makes it a compare-and-swap.
func (c *Client) Delete(ctx context.Context, ref Ref, version string) error {
	q := nsQuery(ref.Namespace)
	if version != "" {
		q.Set("version", version)
	}
	return c.do(ctx, http.MethodDelete, c.resourceURL(ref.Type, ref.Name, q), nil, nil)
}

// ListOptions narrow a list or a watch.
type ListOptions struct {
	Namespace  string // "" the default namespace, "*" every namespace
	Prefix     string // names starting with it
	Consistent bool   // lists only: a strong read
	Index      uint64 // watches only: resume after this index
}

func (o ListOptions) query() url.Values {
	q := nsQuery(o.Namespace)
	if o.Prefix != "" {
		q.Set("prefix", o.Prefix)
	}
	return q
}

// List returns the resources of a type.
func (c *Client) List(ctx context.Context, typ wire.Type, opts ListOptions) ([]*wire.Resource, error) {
	q := opts.query()
	if opts.Consistent {
		q.Set("consistent", "1")
	}
	var out wire.ListResponse
	if err := c.do(ctx, http.MethodGet, c.resourceURL(typ, "", q), nil, &out); err != nil {
		return nil, err
	}
	return out.Resources, nil
}

// Leader returns the cluster leader's Raft address, "" when there is none.
func (c *Client) Leader(ctx context.Context) (string, error) {
	var out string
	err := c.do(ctx, http.MethodGet, c.pathURL("/v1/status/leader"), nil, &out)
	return out, err
}

// Peers returns the Raft addresses of the cluster's voters.
func (c *Client) Peers(ctx context.Context) ([]string, error) {
	var out []string
	err := c.do(ctx, http.MethodGet, c.pathURL("/v1/status/peers"), nil, &out)
	return out, err
}

// Health returns nil when the server reports itself healthy.
func (c *Client) Health(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, c.pathURL("/v1/health"), nil, nil)
}

func nsQuery(namespace string) url.Values {
	q := url.Values{}
	if namespace != "" {
		q.Set("namespace", namespace)
	}
	return q
}

// formatIndex is used for ?index=.
func formatIndex(i uint64) string { return strconv.FormatUint(i, 10) }
