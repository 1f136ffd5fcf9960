package server

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pbca "trellis.dev/trellis/api/ca/v1"
	pbstorage "trellis.dev/trellis/api/storage/v1"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/tlsutil"
)

// Who may call what on the server-to-server port: this datacenter's
// servers everything; another datacenter's servers only the services
// served to every datacenter (the CA's federation); with TLS, nothing
// without a verified server; a plaintext port proves nothing and gates
// nothing.
func TestAdmitServerCall(t *testing.T) {
	all := map[string]bool{"trellis.ca.v1.CAFederation": true}
	own := tlsutil.ServerPeer{Datacenter: "dc1", Kind: tlsutil.PeerConnect}
	other := tlsutil.ServerPeer{Datacenter: "dc2", Kind: tlsutil.PeerClusterCA}
	tests := []struct {
		name     string
		method   string
		peer     tlsutil.ServerPeer
		verified bool
		tls      bool
		want     codes.Code
		caller   module.ServerCaller
	}{
		{"own server, raw storage", pbstorage.Forwarding_Read_FullMethodName, own, true, true, codes.OK, module.ServerCaller{Datacenter: "dc1"}},
		{"own server, federation", pbca.CAFederation_SignIntermediate_FullMethodName, own, true, true, codes.OK, module.ServerCaller{Datacenter: "dc1"}},
		{"other datacenter, federation", pbca.CAFederation_SignIntermediate_FullMethodName, other, true, true, codes.OK, module.ServerCaller{Datacenter: "dc2"}},
		{"other datacenter, roots", pbca.CAFederation_Roots_FullMethodName, other, true, true, codes.OK, module.ServerCaller{Datacenter: "dc2"}},
		{"other datacenter, raw read", pbstorage.Forwarding_Read_FullMethodName, other, true, true, codes.PermissionDenied, module.ServerCaller{}},
		{"other datacenter, raw write", pbstorage.Forwarding_Apply_FullMethodName, other, true, true, codes.PermissionDenied, module.ServerCaller{}},
		{"other datacenter, forwarded heartbeats", pbagent.HeartbeatForwarding_ForwardHeartbeats_FullMethodName, other, true, true, codes.PermissionDenied, module.ServerCaller{}},
		{"other datacenter, a method named like the service", "/trellis.ca.v1.CAFederationX/Roots", other, true, true, codes.PermissionDenied, module.ServerCaller{}},
		{"TLS, no verified server", pbca.CAFederation_Roots_FullMethodName, tlsutil.ServerPeer{}, false, true, codes.Unauthenticated, module.ServerCaller{}},
		{"TLS, a peer without a datacenter", pbstorage.Forwarding_Read_FullMethodName, tlsutil.ServerPeer{}, true, true, codes.Unauthenticated, module.ServerCaller{}},
		{"plaintext", pbstorage.Forwarding_Read_FullMethodName, tlsutil.ServerPeer{}, false, false, codes.OK, module.ServerCaller{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			caller, err := admitServerCall(tt.method, tt.peer, tt.verified, tt.tls, "dc1", all)
			if got := status.Code(err); got != tt.want {
				t.Fatalf("admitServerCall = %v, want %s", err, tt.want)
			}
			if caller != tt.caller {
				t.Errorf("caller = %+v, want %+v", caller, tt.caller)
			}
			if tt.want == codes.PermissionDenied && (!strings.Contains(err.Error(), `"dc1"`) || !strings.Contains(err.Error(), `"dc2"`)) {
				t.Errorf("refusal %q does not name both datacenters", err)
			}
		})
	}
}
