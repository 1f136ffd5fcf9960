package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// Prober makes one probe. It returns when the probe is decided or ctx
// ends; Run bounds ctx by the check's Timeout.
type Prober interface {
	Probe(ctx context.Context) Result
}

// ExecFunc runs a command inside the container: driver.Driver.Exec bound to
// the container's handle.
type ExecFunc func(ctx context.Context, cmd []string) (code int, output []byte, err error)

// DialFunc opens a connection for a probe: the agent's own dialer, or one
// that dials from inside a task's network namespace (netns.Dialer), where
// a bridge task's 127.0.0.1 and ports are.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// NewProber returns the prober of c. exec is needed for command checks
// only; dial, when not nil, opens the connections of http and tcp checks
// (a bridge task's network namespace).
func NewProber(c Check, exec ExecFunc, dial DialFunc) (Prober, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch c.Kind() {
	case "command":
		if exec == nil {
			return nil, errors.New("command: the container's driver cannot run commands in it")
		}
		return CommandProber{Command: c.Command, Exec: exec}, nil
	case "http":
		p := NewHTTPProber(c.HTTP)
		p.Dial = dial
		return p, nil
	default:
		return TCPProber{Addr: c.TCP, Dial: dial}, nil
	}
}

// CommandProber runs a command in the container; exit code 0 passes.
type CommandProber struct {
	Command []string
	Exec    ExecFunc
}

func (p CommandProber) Probe(ctx context.Context) Result {
	code, out, err := p.Exec(ctx, p.Command)
	if err != nil {
		if ctx.Err() != nil {
			return Result{Output: "command timed out"}
		}
		return Result{Output: fmt.Sprintf("command could not run: %v", err)}
	}
	text := strings.TrimSpace(string(out))
	if code != 0 {
		return Result{Output: fmt.Sprintf("exit code %d: %s", code, text)}
	}
	return Result{Pass: true, Output: text}
}

// HTTPProber GETs a URL; a 2xx or 3xx status passes. Redirects are not
// followed (a 3xx is an answer from the container, which is what the check
// wants to know), and connections are not kept between probes, so that
// each probe sees whether the container accepts a new one.
type HTTPProber struct {
	URL string
	// Dial, when set, opens the probe's connection (see DialFunc).
	Dial DialFunc
}

// probeClient is shared by HTTP probers: it follows no redirects, keeps no
// connections and ignores proxy settings from the environment (a health
// check talks to the container, never through a proxy).
var probeClient = &http.Client{
	Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	},
}

// NewHTTPProber returns a prober of url.
func NewHTTPProber(url string) HTTPProber {
	return HTTPProber{URL: url}
}

func (p HTTPProber) Probe(ctx context.Context) Result {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
	if err != nil {
		return Result{Output: fmt.Sprintf("GET %s: %v", p.URL, err)}
	}
	req.Header.Set("User-Agent", "trellis-health-check")
	client := probeClient
	if p.Dial != nil {
		client = &http.Client{
			Transport:     &http.Transport{DisableKeepAlives: true, Proxy: nil, DialContext: p.Dial},
			CheckRedirect: probeClient.CheckRedirect,
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return Result{Output: fmt.Sprintf("GET %s: timed out", p.URL)}
		}
		return Result{Output: fmt.Sprintf("GET %s: %v", p.URL, err)}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxOutput))
	out := fmt.Sprintf("GET %s: %s", p.URL, resp.Status)
	if b := strings.TrimSpace(string(body)); b != "" {
		out += ": " + b
	}
	return Result{Pass: resp.StatusCode >= 200 && resp.StatusCode < 400, Output: out}
}

// TCPProber connects to an address; an accepted connection passes.
type TCPProber struct {
	Addr string
	// Dial, when set, opens the connection (see DialFunc).
	Dial DialFunc
}

func (p TCPProber) Probe(ctx context.Context) Result {
	dial := p.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	conn, err := dial(ctx, "tcp", p.Addr)
	if err != nil {
		if ctx.Err() != nil {
			return Result{Output: fmt.Sprintf("connect %s: timed out", p.Addr)}
		}
		return Result{Output: fmt.Sprintf("connect %s: %v", p.Addr, err)}
	}
	conn.Close()
	return Result{Pass: true, Output: fmt.Sprintf("connected to %s", p.Addr)}
}
