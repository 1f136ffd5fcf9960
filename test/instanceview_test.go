package test

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// registeredData is an Instance's data as the API's JSON gives it, with its
// agent's registration (status["agent"]) merged over it by
// orchestrator.MergeRegistration, as every reader merges it, re-encoded
// with the proto field names so that the tests' own structs decode it. The
// servers' down verdict (status["orchestrator-instance"]) is left to the
// caller.
func registeredData(data json.RawMessage, status map[string]json.RawMessage) (json.RawMessage, error) {
	in := &pborch.Instance{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, in); err != nil {
		return nil, fmt.Errorf("instance data: %w", err)
	}
	res := &pbresource.Resource{Status: map[string]*pbresource.Status{}}
	if raw, ok := status[orchestrator.AgentStatusKey]; ok {
		st := &pbresource.Status{}
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, st); err != nil {
			return nil, fmt.Errorf("instance status[%q]: %w", orchestrator.AgentStatusKey, err)
		}
		res.Status[orchestrator.AgentStatusKey] = st
	}
	return protojson.MarshalOptions{UseProtoNames: true}.Marshal(orchestrator.MergeRegistration(in, orchestrator.RegistrationOf(res)))
}

// rawInstance is an Instance's JSON as the API gives it.
type rawInstance struct {
	Data   json.RawMessage            `json:"data"`
	Status map[string]json.RawMessage `json:"status"`
}

// UnmarshalJSON decodes an Instance with its registration merged into
// Data (registeredData).
func (in *instanceJSON) UnmarshalJSON(b []byte) error {
	var raw rawInstance
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	data, err := registeredData(raw.Data, raw.Status)
	if err != nil {
		return err
	}
	type plain instanceJSON // without this method
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	p.Data = instanceJSON{}.Data
	if err := json.Unmarshal(data, &p.Data); err != nil {
		return err
	}
	*in = instanceJSON(p)
	return nil
}

// UnmarshalJSON decodes an Instance with its registration merged into
// Data (registeredData).
func (in *instanceJSONFull) UnmarshalJSON(b []byte) error {
	var raw rawInstance
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	data, err := registeredData(raw.Data, raw.Status)
	if err != nil {
		return err
	}
	type plain instanceJSONFull
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	p.Data = histInstance{}
	if err := json.Unmarshal(data, &p.Data); err != nil {
		return err
	}
	*in = instanceJSONFull(p)
	return nil
}
