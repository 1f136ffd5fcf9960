package camodule_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pbca "trellis.dev/trellis/api/ca/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/ca/camodule"
)

// A server identity is never signed on request: POST /v1/ca/sign and the
// public gRPC Sign refuse it, naming the reason and the field, whatever
// its trust domain or datacenter, so that no agent can hold a server's
// identity.
func TestSignRefusesServerIdentities(t *testing.T) {
	srv := start(t, nil)
	base := "http://" + srv.HTTPAddr()
	td := activeRoots(t, base).TrustDomain
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pbca.NewCAServiceClient(conn)
	key := p256(t)
	cases := []struct {
		name string
		id   ca.ServerID
	}{
		{"this datacenter's", ca.ServerID{TrustDomain: td, Datacenter: "dc1", Server: "s-1"}},
		{"another datacenter's", ca.ServerID{TrustDomain: td, Datacenter: "dc2", Server: "s-1"}},
		{"another trust domain's", ca.ServerID{TrustDomain: "other.trellis", Datacenter: "dc1", Server: "s-1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			csr := newCSR(t, key, []string{c.id.String()})
			resp, b := postSign(t, base, csr)
			var r camodule.RefusalBody
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatalf("%d %s: %v", resp.StatusCode, b, err)
			}
			if resp.StatusCode != http.StatusBadRequest || r.Reason != ca.ReasonServerID || r.Field != "csr.uri_san" || !strings.Contains(r.Error, "a server's identity") {
				t.Errorf("POST /v1/ca/sign = %d %+v, want 400 %s naming csr.uri_san", resp.StatusCode, r, ca.ReasonServerID)
			}
			_, err := client.Sign(context.Background(), &pbca.SignRequest{CsrPem: csr})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "csr.uri_san: "+c.id.String()+" is a server's identity") {
				t.Errorf("gRPC Sign = %v, want InvalidArgument naming csr.uri_san", err)
			}
		})
	}
	if m := scrape(t, base); !strings.Contains(m, `trellis_ca_sign_refusals_total{reason="server_id"} 6`) {
		t.Errorf("the refusals are not counted by reason:\n%s", grepLines(m, "trellis_ca_sign_refusals"))
	}
}
