package resource

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

// DecodeData decodes a resource's data into a new T, for hooks and
// controllers that work on a type's message:
//
//	ns, err := resource.DecodeData[*pbcore.Namespace](res)
//
// The error is a FieldError naming "data".
func DecodeData[T proto.Message](res *pbresource.Resource) (T, error) {
	var zero T
	msg := zero.ProtoReflect().Type().New().Interface().(T)
	want := msg.ProtoReflect().Descriptor().FullName()
	data := res.GetData()
	if data == nil {
		return zero, NewFieldError("data", "is required: a %s", want)
	}
	if got := data.MessageName(); got != want {
		return zero, NewFieldError("data", "has type %q, not %s", data.GetTypeUrl(), want)
	}
	if err := proto.Unmarshal(data.GetValue(), msg); err != nil {
		return zero, NewFieldError("data", "does not decode as %s: %v", want, err)
	}
	return msg, nil
}

// MutateData decodes a resource's data, lets fill change it, and stores
// it back: the body of most Mutate hooks.
func MutateData[T proto.Message](res *pbresource.Resource, fill func(T)) error {
	msg, err := DecodeData[T](res)
	if err != nil {
		return err
	}
	fill(msg)
	data, err := anypb.New(msg)
	if err != nil {
		return NewFieldError("data", "cannot be encoded: %v", err)
	}
	res.Data = data
	return nil
}
