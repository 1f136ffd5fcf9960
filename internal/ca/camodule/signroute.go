package camodule

import (
	"errors"
	"net/http"

	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/httpapi/wire"
)

// The signing route, POST /v1/ca/sign; docs/ca.md is its contract.

// RefusalBody is the answer to a refused CSR (400): the error and code
// every refusal of the API has, and the refusal's reason and field.
type RefusalBody struct {
	Error  string `json:"error"`
	Code   string `json:"code"`
	Reason string `json:"reason"`
	Field  string `json:"field"`
}

// RateLimitedBody is the answer over the signing limit (429, with a
// Retry-After header).
type RateLimitedBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	// Limit is "rate" or "concurrency".
	Limit string `json:"limit"`
}

// CodeTooManyRequests is the code of a 429.
const CodeTooManyRequests = "too_many_requests"

type signRoute struct{ signer *Signer }

// table is the route. It needs operator:write for now: the caller
// names the identity in the CSR (any service of any namespace, or an
// agent), and until ACLs can check that identity against the caller's
// token (namespace:write on the service's namespace, agent for an agent
// id, refused with ca.ReasonNotAllowed), only an operator may ask for
// any of them. Agents sign over gRPC (CAService.Sign, agent).
func (h signRoute) table() []httpapi.Route {
	return []httpapi.Route{
		{Pattern: "POST /v1/ca/sign", Permission: acl.OperatorWrite, Handler: h.sign},
		{Pattern: "/v1/ca/sign", Permission: acl.Public, Handler: httpapi.MethodNotAllowed("POST")},
	}
}

func (h signRoute) sign(w http.ResponseWriter, r *http.Request) error {
	if _, err := httpapi.Params(r); err != nil {
		return err
	}
	var req SignRequestBody
	if err := httpapi.DecodeJSON(r, &req); err != nil {
		return err
	}
	leaf, err := h.signer.Sign(r.Context(), []byte(req.CSR))
	var refusal *ca.Refusal
	var limited *RateLimitedError
	switch {
	case errors.As(err, &refusal):
		httpapi.WriteJSON(w, http.StatusBadRequest, RefusalBody{
			Error: refusal.Error(), Code: wire.CodeInvalidArgument, Reason: refusal.Reason, Field: refusal.Field,
		})
		return nil
	case errors.As(err, &limited):
		w.Header().Set("Retry-After", limited.RetryAfterSeconds())
		httpapi.WriteJSON(w, http.StatusTooManyRequests, RateLimitedBody{
			Error: limited.Error(), Code: CodeTooManyRequests, Limit: limited.Limit,
		})
		return nil
	case err != nil:
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, SignBody{
		CertPEM: leaf.CertPEM, ChainPEM: leaf.ChainPEM, Serial: leaf.Serial, NotAfter: leaf.NotAfter.UTC(),
	})
	return nil
}
