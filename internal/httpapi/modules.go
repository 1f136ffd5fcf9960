package httpapi

import (
	"context"
	"encoding/json"
	"net/http"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/resource"
)

// This file is what a module's routes (Config.Routes) use to read requests
// and write answers the way the API's own routes do: the same refusals of
// bad input naming the field, the same JSON shapes, the same errors. A
// route's handler returns an error rather than writing one; the router
// maps it to a status (gRPC status codes, storage sentinels, FieldError)
// and answers {"error", "code"}.

// DecodeJSON reads the request's body, one JSON object, into v, refusing
// unknown fields, anything after the object, and a body over the router's
// limit, each with an error naming the field at fault.
func DecodeJSON(r *http.Request, v any) error { return decodeJSON(r.Body, v) }

// UnmarshalProto reads raw, the protojson form of m, into m; an error
// names field, the JSON field raw came from.
func UnmarshalProto(raw json.RawMessage, m proto.Message, field string) error {
	if err := unmarshalOpts.Unmarshal(raw, m); err != nil {
		return inputError(field, "%s", cleanProtoError(err))
	}
	return nil
}

// Params reads the query parameters named in allowed, each at most once,
// and refuses any other: a misspelled ?namespce= must not quietly act on
// the default. A parameter not given is "".
func Params(r *http.Request, allowed ...string) (map[string]string, error) {
	out := make(map[string]string, len(allowed))
	err := eachParam(r.URL.Query(), allowed, func(k, v string) error {
		out[k] = v
		return nil
	})
	return out, err
}

type stoppingKey struct{}

// Stopping returns a context that ends when the server begins to shut
// down, for a request a Handler serves (context.Background otherwise). A
// route that holds a request open, such as a blocking read, answers when
// it ends, as the API's own watches do, so that the server's shutdown
// does not wait on it.
func Stopping(ctx context.Context) context.Context {
	if s, ok := ctx.Value(stoppingKey{}).(context.Context); ok {
		return s
	}
	return context.Background()
}

// InputError is a refusal of bad input that names the field at fault
// (a *FieldError, answered 400).
func InputError(field, format string, args ...any) error {
	return inputError(field, format, args...)
}

// WriteJSON answers v as JSON with the status.
func WriteJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }

// EncodeJSON is v's answer as WriteJSON writes it, for a route that
// encodes an answer once and writes it to many requests
// (WriteEncodedJSON).
func EncodeJSON(v any) ([]byte, error) { return encodeJSON(v) }

// WriteEncodedJSON answers body, made by EncodeJSON, with the status. The
// body is not modified: requests may share it.
func WriteEncodedJSON(w http.ResponseWriter, status int, body []byte) {
	writeEncodedJSON(w, status, body)
}

// ToWire renders a resource as the API answers one, its data in the
// protojson form of its registered message.
func ToWire(reg *resource.Registry, res *pbresource.Resource) *wire.Resource { return toWire(reg, res) }

// ToWireList renders resources as ToWire does.
func ToWireList(reg *resource.Registry, list []*pbresource.Resource) []*wire.Resource {
	out := make([]*wire.Resource, len(list))
	for i, res := range list {
		out[i] = toWire(reg, res)
	}
	return out
}

// ProtoJSON renders a computed view with every field present, so that a
// zero count reads 0 rather than missing.
func ProtoJSON(m proto.Message) json.RawMessage {
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	return b
}
