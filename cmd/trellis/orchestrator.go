package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/scheduler"
)

// The orchestrator's types as the HTTP API names them.
var (
	instanceWire = wire.Type{Group: orchestrator.Group, GroupVersion: orchestrator.GroupVersion, Kind: "Instance"}
	taskDefWire  = wire.Type{Group: orchestrator.Group, GroupVersion: orchestrator.GroupVersion, Kind: "TaskDefinition"}
	taskWire     = wire.Type{Group: orchestrator.Group, GroupVersion: orchestrator.GroupVersion, Kind: "Task"}

	environmentVersionWire = wire.Type{Group: scheduler.APIGroup, GroupVersion: scheduler.GroupVersion, Kind: "EnvironmentVersion"}
)

// decodeData reads a resource's data into msg. Fields this CLI does not
// know (a newer server) are skipped.
func decodeData(r *wire.Resource, msg proto.Message) error {
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(r.Data, msg); err != nil {
		return fmt.Errorf("%s: the server returned data this CLI cannot read: %w", describe(r), err)
	}
	return nil
}

// encodeData is the JSON the HTTP API takes as a resource's data.
func encodeData(msg proto.Message) (json.RawMessage, error) {
	return protojson.MarshalOptions{UseProtoNames: true}.Marshal(msg)
}

// writeResources prints resources as -o json or yaml asks: one resource
// as itself, several as a list, exactly as the API returns them.
func writeResources(w io.Writer, out string, list []*wire.Resource, single bool) error {
	if single && len(list) == 1 {
		return cli.WriteValue(w, out, list[0])
	}
	return cli.WriteValue(w, out, wire.ListResponse{Resources: list})
}

// readInstance reads one Instance.
func readInstance(ctx context.Context, c *client.Client, name string) (*wire.Resource, *pborch.Instance, error) {
	r, err := c.Read(ctx, client.Ref{Type: instanceWire, Name: name}, false)
	if err != nil {
		if client.IsCode(err, wire.CodeNotFound) {
			return nil, nil, fmt.Errorf("instance %q is not registered (trellis instance list shows the instances)", name)
		}
		return nil, nil, serverError(c, err)
	}
	var in pborch.Instance
	if err := decodeData(r, &in); err != nil {
		return nil, nil, err
	}
	return r, &in, nil
}

func joinSorted(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}
