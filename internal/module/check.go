package module

import (
	"errors"
	"fmt"
	"sort"

	"trellis.dev/trellis/internal/acl"
)

// ErrUndeclared is wrapped by Check's refusals: a part that declares no
// permission, or declares one for something that does not exist.
var ErrUndeclared = errors.New("undeclared permission")

// Check refuses parts the server must not serve: a gRPC method or an HTTP
// route that declares no permission, a permission declared for a method
// its service does not have, a service or route without a handler, a
// runnable without a name or a part to run. It names the first fault.
func (p Parts) Check() error {
	for _, list := range [][]Service{p.PublicServices, p.ServerServices} {
		for _, s := range list {
			if _, err := s.FullPermissions(); err != nil {
				return err
			}
		}
	}
	for _, s := range p.PublicServices {
		if s.AllDatacenters {
			return fmt.Errorf("%s: AllDatacenters on a public service: only the server-to-server port knows which datacenter a caller is a server of", s.Desc.ServiceName)
		}
	}
	for _, r := range p.Routes {
		if r.Handler == nil {
			return fmt.Errorf("route %q: no handler", r.Pattern)
		}
		if !r.Permission.Declared() {
			return fmt.Errorf("route %q: %w: every route declares the permission a caller needs", r.Pattern, ErrUndeclared)
		}
	}
	for i, r := range p.Runnables {
		if r.Name == "" || r.Run == nil {
			return fmt.Errorf("runnable %d (%q): needs a name and a part to run", i, r.Name)
		}
	}
	for _, c := range p.Controllers {
		if c.Name == "" {
			return errors.New("a controller has no name")
		}
	}
	return nil
}

// FullPermissions returns the permission of each method of the service,
// keyed by its full gRPC name ("/trellis.agent.v1.AgentService/Heartbeat"),
// as the server's interceptor looks it up. It refuses a method without a
// declared permission and a permission for a method the service lacks.
func (s Service) FullPermissions() (map[string]acl.Permission, error) {
	if s.Desc == nil || s.Impl == nil {
		return nil, errors.New("a gRPC service needs its Desc and its Impl")
	}
	names := make(map[string]bool, len(s.Desc.Methods)+len(s.Desc.Streams))
	for _, m := range s.Desc.Methods {
		names[m.MethodName] = true
	}
	for _, st := range s.Desc.Streams {
		names[st.StreamName] = true
	}
	out := make(map[string]acl.Permission, len(names))
	for _, m := range sortedKeys(names) {
		p, ok := s.Permissions[m]
		if !ok || !p.Declared() {
			return nil, fmt.Errorf("%s.%s: %w: every method declares the permission a caller needs", s.Desc.ServiceName, m, ErrUndeclared)
		}
		out["/"+s.Desc.ServiceName+"/"+m] = p
	}
	for _, m := range sortedKeys(s.Permissions) {
		if !names[m] {
			return nil, fmt.Errorf("%s.%s: %w: the service has no such method", s.Desc.ServiceName, m, ErrUndeclared)
		}
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
