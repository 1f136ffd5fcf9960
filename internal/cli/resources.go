package cli

import (
	"encoding/json"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"trellis.dev/trellis/internal/httpapi/wire"
)

// How the commands of every domain read and print resources as the HTTP
// API carries them.

// Describe names a resource as type/[namespace/]name.
func Describe(r *wire.Resource) string {
	s := r.ID.Type.String() + "/"
	if r.ID.Tenancy.Namespace != "" {
		s += r.ID.Tenancy.Namespace + "/"
	}
	return s + r.ID.Name
}

// DecodeData reads a resource's data into msg. Fields this CLI does not
// know (a newer server) are skipped.
func DecodeData(r *wire.Resource, msg proto.Message) error {
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(r.Data, msg); err != nil {
		return fmt.Errorf("%s: the server returned data this CLI cannot read: %w", Describe(r), err)
	}
	return nil
}

// EncodeData is the JSON the HTTP API takes as a resource's data.
func EncodeData(msg proto.Message) (json.RawMessage, error) {
	return protojson.MarshalOptions{UseProtoNames: true}.Marshal(msg)
}

// ResourceList is what -o json or yaml prints for resources: one resource
// as itself when single, else a list, exactly as the API returns them.
func ResourceList(list []*wire.Resource, single bool) any {
	if single && len(list) == 1 {
		return list[0]
	}
	return wire.ListResponse{Resources: list}
}

// WriteResources prints resources as -o json or yaml asks (see
// ResourceList).
func WriteResources(w io.Writer, format string, list []*wire.Resource, single bool) error {
	return WriteValue(w, format, ResourceList(list, single))
}
