package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/resource"
)

// This file converts between the protobuf resource model and its JSON face.
// A resource's data travels as the plain protojson form of its registered
// message: the URL (or a document's type) already names the type, so an
// "@type" would only be something to get wrong.

var (
	marshalOpts   = protojson.MarshalOptions{UseProtoNames: true}
	unmarshalOpts = protojson.UnmarshalOptions{}
)

// ErrBadInput is wrapped by every refusal of a malformed request.
var ErrBadInput = errors.New("bad input")

// ErrTooLarge is wrapped when a request body passes the limit.
var ErrTooLarge = errors.New("request body too large")

// FieldError is a refusal of a request that names the field at fault
// ("data.spec.port", "namespace", "body"). It wraps ErrBadInput, or
// ErrTooLarge for a body over the limit.
type FieldError struct {
	Field  string
	Reason string
	kind   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

func (e *FieldError) Unwrap() error {
	if e.kind != nil {
		return e.kind
	}
	return ErrBadInput
}

// inputError is a refusal of bad input that names the field at fault.
func inputError(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// toWire renders res for a response. It never fails: data whose message is
// unknown to this process is rendered as a protojson Any (with "@type")
// rather than hidden.
func toWire(reg *resource.Registry, res *pbresource.Resource) *wire.Resource {
	out := &wire.Resource{
		ID:         idToWire(res.GetId()),
		Version:    res.GetVersion(),
		Generation: strconv.FormatUint(res.GetGeneration(), 10),
		Metadata:   res.GetMetadata(),
		Data:       dataToJSON(reg, res),
		Status:     make(map[string]json.RawMessage, len(res.GetStatus())),
	}
	if out.Metadata == nil {
		out.Metadata = map[string]string{}
	}
	if res.GetOwner() != nil {
		owner := idToWire(res.GetOwner())
		out.Owner = &owner
	}
	for key, st := range res.GetStatus() {
		out.Status[key] = statusToJSON(st)
	}
	return out
}

// statusToJSON renders one status entry as protojson does: its payload
// (data) an Any with its "@type" beside the payload's fields, since the
// key, unlike a URL's type, does not say what it holds. A payload whose
// message this process does not know is shown by its type alone.
func statusToJSON(st *pbresource.Status) json.RawMessage {
	b, err := marshalOpts.Marshal(st)
	if err == nil {
		return b
	}
	if st.GetData() != nil {
		bare := &pbresource.Status{ObservedGeneration: st.GetObservedGeneration(), Conditions: st.GetConditions()}
		if b, err := marshalOpts.Marshal(bare); err == nil {
			var fields map[string]json.RawMessage
			if json.Unmarshal(b, &fields) == nil {
				fields["data"], _ = json.Marshal(map[string]string{"@type": st.GetData().GetTypeUrl()})
				if b, err := json.Marshal(fields); err == nil {
					return b
				}
			}
		}
	}
	b, _ = json.Marshal(map[string]string{"error": err.Error()})
	return b
}

func dataToJSON(reg *resource.Registry, res *pbresource.Resource) json.RawMessage {
	data := res.GetData()
	if data == nil {
		return json.RawMessage("{}")
	}
	var msg proto.Message
	if r, ok := reg.Resolve(res.GetId().GetType()); ok && data.MessageIs(r.Proto) {
		msg = r.Proto.ProtoReflect().New().Interface()
		if err := data.UnmarshalTo(msg); err != nil {
			msg = nil
		}
	}
	if msg == nil {
		if m, err := data.UnmarshalNew(); err == nil {
			msg = m
		}
	}
	if msg != nil {
		if b, err := marshalOpts.Marshal(msg); err == nil {
			return b
		}
	}
	b, err := marshalOpts.Marshal(data)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"@type": data.GetTypeUrl()})
	}
	return b
}

func idToWire(id *pbresource.ID) wire.ID {
	return wire.ID{
		UID:  id.GetUid(),
		Name: id.GetName(),
		Type: wire.Type{
			Group:        id.GetType().GetGroup(),
			GroupVersion: id.GetType().GetGroupVersion(),
			Kind:         id.GetType().GetKind(),
		},
		Tenancy: wire.Tenancy{Namespace: id.GetTenancy().GetNamespace()},
	}
}

func idFromWire(id *wire.ID) *pbresource.ID {
	if id == nil {
		return nil
	}
	return &pbresource.ID{
		Uid:  id.UID,
		Name: id.Name,
		Type: &pbresource.Type{
			Group:        id.Type.Group,
			GroupVersion: id.Type.GroupVersion,
			Kind:         id.Type.Kind,
		},
		Tenancy: &pbresource.Tenancy{Namespace: id.Tenancy.Namespace},
	}
}

func typeFromWire(t wire.Type) *pbresource.Type {
	return &pbresource.Type{Group: t.Group, GroupVersion: t.GroupVersion, Kind: t.Kind}
}

// decodeData decodes the plain JSON form of reg's message into an Any.
// Absent or null data is the empty message. field names the data in error
// messages ("data", "resources[2].data").
func decodeData(reg resource.Registration, raw json.RawMessage, field string) (*anypb.Any, error) {
	msg := reg.Proto.ProtoReflect().New().Interface()
	trimmed := strings.TrimSpace(string(raw))
	if trimmed != "" && trimmed != "null" {
		if !strings.HasPrefix(trimmed, "{") {
			return nil, inputError(field, "must be a JSON object (the fields of %s)", msg.ProtoReflect().Descriptor().FullName())
		}
		if err := checkFields(msg.ProtoReflect().Descriptor(), raw, field); err != nil {
			return nil, err
		}
		if err := unmarshalOpts.Unmarshal(raw, msg); err != nil {
			return nil, inputError(field, "%s", cleanProtoError(err))
		}
	}
	a, err := anypb.New(msg)
	if err != nil {
		return nil, inputError(field, "%v", err)
	}
	return a, nil
}

// checkFields walks raw against md and refuses fields md does not have,
// naming each by its path (data.spec.ports[0].nme). protojson would refuse
// them too, but without the path. Values it cannot interpret are left for
// protojson to report.
func checkFields(md protoreflect.MessageDescriptor, raw json.RawMessage, path string) error {
	if strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		return nil // well-known types have their own JSON forms
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var unknown []string
	for _, k := range keys {
		fd := md.Fields().ByJSONName(k)
		if fd == nil {
			fd = md.Fields().ByTextName(k)
		}
		if fd == nil {
			unknown = append(unknown, strconv.Quote(k))
			continue
		}
		if err := checkValue(fd, obj[k], path+"."+k); err != nil {
			return err
		}
	}
	if len(unknown) > 0 {
		noun := "field"
		if len(unknown) > 1 {
			noun = "fields"
		}
		return inputError(path, "unknown %s %s (%s has: %s)", noun, strings.Join(unknown, ", "),
			md.FullName(), knownFields(md))
	}
	return nil
}

func checkValue(fd protoreflect.FieldDescriptor, raw json.RawMessage, path string) error {
	switch {
	case fd.IsMap():
		if fd.MapValue().Message() == nil {
			return nil
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return nil
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := checkFields(fd.MapValue().Message(), m[k], fmt.Sprintf("%s[%q]", path, k)); err != nil {
				return err
			}
		}
	case fd.Message() == nil:
	case fd.IsList():
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return nil
		}
		for i, item := range items {
			if err := checkFields(fd.Message(), item, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	default:
		return checkFields(fd.Message(), raw, path)
	}
	return nil
}

func knownFields(md protoreflect.MessageDescriptor) string {
	fields := md.Fields()
	if fields.Len() == 0 {
		return "no fields"
	}
	names := make([]string, fields.Len())
	for i := range fields.Len() {
		names[i] = string(fields.Get(i).Name())
	}
	return strings.Join(names, ", ")
}

var protoLinePos = regexp.MustCompile(`\s*\(line \d+:\d+\)`)

// cleanProtoError strips protojson's "proto:" prefix (written with a
// deliberately unstable space) and its line positions, which count from
// the start of the data object rather than of the request.
func cleanProtoError(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "proto:")
	s = strings.TrimLeft(s, " \u00a0")
	s = protoLinePos.ReplaceAllString(s, "")
	s = strings.TrimPrefix(s, ": ")
	return s
}
