package acl

import (
	"errors"
	"strings"
	"testing"
)

// recorder refuses what refuse names and records what it was asked.
type recorder struct {
	refuse map[string]error
	asked  []string
}

func (r *recorder) ask(what string) error {
	r.asked = append(r.asked, what)
	return r.refuse[what]
}
func (r *recorder) OperatorRead() error            { return r.ask("operator:read") }
func (r *recorder) OperatorWrite() error           { return r.ask("operator:write") }
func (r *recorder) NamespaceRead(ns string) error  { return r.ask("namespace:read:" + ns) }
func (r *recorder) NamespaceWrite(ns string) error { return r.ask("namespace:write:" + ns) }
func (r *recorder) Agent() error                   { return r.ask("agent") }
func (r *recorder) Server() error                  { return r.ask("server") }

func TestCheck(t *testing.T) {
	denied := ErrPermissionDenied
	expired := errors.Join(ErrPermissionDenied, errors.New("token expired"))
	broken := errors.New("policy store unreachable")
	tests := []struct {
		name    string
		p       Permission
		ns      string
		refuse  map[string]error
		asked   string // what the authorizer was asked; "" for nothing
		denied  bool
		fault   bool
		message string
	}{
		{name: "public asks nothing", p: Public, refuse: map[string]error{"operator:read": denied}},
		{name: "per-resource asks nothing", p: PerResource},
		{name: "undeclared is closed", p: Undeclared, denied: true, message: "declares no permission"},
		{name: "unknown value is closed", p: Permission(99), denied: true, message: "declares no permission"},
		{name: "operator read allowed", p: OperatorRead, asked: "operator:read"},
		{name: "operator write refused", p: OperatorWrite, refuse: map[string]error{"operator:write": denied},
			asked: "operator:write", denied: true, message: "needs operator:write"},
		{name: "namespace read names namespace", p: NamespaceRead, ns: "team-a", refuse: map[string]error{"namespace:read:team-a": expired},
			asked: "namespace:read:team-a", denied: true, message: `needs namespace:read on namespace "team-a": `},
		{name: "namespace read of every namespace is filtered later", p: NamespaceRead, ns: "*",
			refuse: map[string]error{"namespace:read:*": denied}},
		{name: "namespace write of every namespace is asked", p: NamespaceWrite, ns: "*",
			refuse: map[string]error{"namespace:write:*": denied}, asked: "namespace:write:*", denied: true},
		{name: "agent", p: Agent, refuse: map[string]error{"agent": denied}, asked: "agent", denied: true, message: "needs agent"},
		{name: "server", p: Server, asked: "server"},
		{name: "authorizer fault is not a refusal", p: Server, refuse: map[string]error{"server": broken},
			asked: "server", fault: true, message: "policy store unreachable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{refuse: tt.refuse}
			err := Check(r, tt.p, tt.ns)
			if got := strings.Join(r.asked, ","); got != tt.asked {
				t.Errorf("asked %q, want %q", got, tt.asked)
			}
			var pd *PermissionDeniedError
			switch {
			case tt.denied:
				if !errors.As(err, &pd) || !errors.Is(err, ErrPermissionDenied) {
					t.Fatalf("err = %v, want a PermissionDeniedError", err)
				}
				if pd.Permission != tt.p {
					t.Errorf("denied %v, want %v", pd.Permission, tt.p)
				}
			case tt.fault:
				if err == nil || errors.Is(err, ErrPermissionDenied) {
					t.Fatalf("err = %v, want a fault that is not a refusal", err)
				}
			default:
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
			}
			if tt.message != "" && !strings.Contains(err.Error(), tt.message) {
				t.Errorf("message %q lacks %q", err, tt.message)
			}
		})
	}
}

func TestDenyAllRefusesEveryDeclaredPermission(t *testing.T) {
	for p := range permissionNames {
		err := Check(DenyAll{}, p, "default")
		want := p != Public && p != PerResource
		if got := errors.Is(err, ErrPermissionDenied); got != want {
			t.Errorf("%v: denied=%v, want %v (%v)", p, got, want, err)
		}
		if Check(AllowAll{}, p, "default") != nil && p.Declared() {
			t.Errorf("%v refused under AllowAll", p)
		}
	}
}
