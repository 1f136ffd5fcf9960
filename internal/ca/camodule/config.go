package camodule

import (
	"encoding/json"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	pbca "trellis.dev/trellis/api/ca/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/resource"
)

// A change of the CA's configuration, as PUT /v1/ca/config takes it:
// decided here, from plain values, and written by the route.

// configChange is what a PUT of the configuration writes: the CAConfig
// to store (never with a key), and the supplied root's key to store
// sealed when one came with it.
type configChange struct {
	config *pbca.CAConfig
	// keyPEM and rootID are the supplied root's key and id, when the
	// request supplied a root with its private_key.
	keyPEM   string
	rootCert string
	rootID   string
}

// planConfigChange merges the fields given in raw (the "config" of a
// request, protojson with proto or JSON names) into stored, the current
// configuration, and checks the result. Fields left out keep their
// values; a field given as null takes its default. active is the active
// root (nil when there is none yet) and now the route's time: a supplied
// root must be valid now, and leaf_ttl must not outlive the root that
// will be active. Every refusal names its field and none quotes a key.
func planConfigChange(stored *pbca.CAConfig, raw json.RawMessage, active *pbca.CARoot, now time.Time) (configChange, error) {
	given, next, err := mergeConfig(stored, raw)
	if err != nil {
		return configChange{}, err
	}
	ca.FillConfigDefaults(next)

	if given["rotation"] && next.GetRotation() < stored.GetRotation() {
		return configChange{}, resource.NewFieldError("rotation", "%d is below the current %d: rotation only goes up (leave it out to keep it)", next.GetRotation(), stored.GetRotation())
	}
	keptRoot := next.GetRootCert() != "" && next.GetPrivateKey() == "" && next.GetRootCert() == stored.GetRootCert()
	if next.GetRootCert() != "" {
		if err := keyTypeOfSupplied(next, given); err != nil {
			return configChange{}, err
		}
	}
	var supplied *suppliedRoot
	check := next
	if keptRoot {
		// The supplied root stored already, sent back as GET shows it:
		// its key is stored sealed and is not asked for again.
		check = proto.Clone(next).(*pbca.CAConfig)
		check.RootCert = ""
	}
	err = ca.ValidateConfigRequest(check, func(certPEM, keyPEM []byte) error {
		cert, _, err := ca.CheckSuppliedRoot(certPEM, keyPEM, now)
		if err != nil {
			return err
		}
		id, err := ca.KeyID(cert.PublicKey)
		if err != nil {
			return resource.NewFieldError("root_cert", "%v", err)
		}
		supplied = &suppliedRoot{id: id, notAfter: cert.NotAfter}
		return nil
	})
	if err != nil {
		return configChange{}, err
	}
	if next.GetRotation() > stored.GetRotation() && keptRoot {
		return configChange{}, resource.NewFieldError("rotation", "the CA signs with the root supplied in root_cert, and a rotation makes a new root: supply a new root_cert with its private_key, or set root_cert to \"\" to have the CA generate one")
	}
	if err := checkLeafTTLAgainstRoot(next, supplied, active, now); err != nil {
		return configChange{}, err
	}
	out := configChange{config: next}
	if supplied != nil {
		out.keyPEM, out.rootCert, out.rootID = next.GetPrivateKey(), next.GetRootCert(), supplied.id
	}
	next.PrivateKey = ""
	return out, nil
}

type suppliedRoot struct {
	id       string
	notAfter time.Time
}

// mergeConfig reads raw into a copy of stored, field by field: the fields
// raw names replace stored's (null clears one), the others stay. It
// returns the proto names of the fields given.
func mergeConfig(stored *pbca.CAConfig, raw json.RawMessage) (map[string]bool, *pbca.CAConfig, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return nil, nil, httpapi.InputError("config", "is not a JSON object of the CA's settings")
	}
	in := &pbca.CAConfig{}
	if err := normalizeDurations(in.ProtoReflect().Descriptor(), fields); err != nil {
		return nil, nil, err
	}
	raw, err := json.Marshal(fields)
	if err != nil {
		return nil, nil, err
	}
	if err := httpapi.UnmarshalProto(raw, in, "config"); err != nil {
		return nil, nil, err
	}
	next := proto.Clone(stored).(*pbca.CAConfig)
	if next == nil {
		next = &pbca.CAConfig{}
	}
	given := map[string]bool{}
	src, dst := in.ProtoReflect(), next.ProtoReflect()
	fds := dst.Descriptor().Fields()
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		v, ok := fields[string(fd.Name())]
		if !ok {
			v, ok = fields[fd.JSONName()]
		}
		if !ok {
			continue
		}
		given[string(fd.Name())] = true
		if string(v) == "null" || !src.Has(fd) {
			dst.Clear(fd)
			continue
		}
		dst.Set(fd, src.Get(fd))
	}
	return given, next, nil
}

// normalizeDurations rewrites the durations of fields given as Go
// durations ("72h", "90m") to protojson's seconds ("259200s"), so that
// people may write either; a string that is neither is refused naming
// its field.
func normalizeDurations(md protoreflect.MessageDescriptor, fields map[string]json.RawMessage) error {
	fds := md.Fields()
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		if fd.Message() == nil || fd.Message().FullName() != "google.protobuf.Duration" {
			continue
		}
		for _, key := range []string{string(fd.Name()), fd.JSONName()} {
			v, ok := fields[key]
			if !ok || string(v) == "null" {
				continue
			}
			var text string
			if err := json.Unmarshal(v, &text); err != nil {
				return httpapi.InputError(string(fd.Name()), "is not a duration: give a string such as \"72h\" or \"259200s\"")
			}
			d, err := time.ParseDuration(text)
			if err != nil {
				return httpapi.InputError(string(fd.Name()), "%q is not a duration: give one such as \"72h\" or \"259200s\"", text)
			}
			b, err := protojson.Marshal(durationpb.New(d))
			if err != nil {
				return err
			}
			fields[key] = b
		}
	}
	return nil
}

// keyTypeOfSupplied sets the key type and size of c to its supplied
// root's, refusing settings given in the same request that say otherwise:
// the root's key is the CA's key. A root_cert that does not parse is left
// to the validation to refuse.
func keyTypeOfSupplied(c *pbca.CAConfig, given map[string]bool) error {
	certs, err := ca.ParseCerts([]byte(c.GetRootCert()))
	if err != nil {
		return nil
	}
	kt, err := ca.KeyTypeOf(certs[0].PublicKey)
	if err != nil {
		return nil
	}
	if given["private_key_type"] && c.GetPrivateKeyType() != kt.Algorithm {
		return resource.NewFieldError("private_key_type", "%q is not the type of the supplied root's key (%s): leave it out, or set root_cert to \"\" to have the CA generate a root", c.GetPrivateKeyType(), kt)
	}
	if given["private_key_bits"] && int(c.GetPrivateKeyBits()) != kt.Bits {
		return resource.NewFieldError("private_key_bits", "%d is not the size of the supplied root's key (%s): leave it out, or set root_cert to \"\" to have the CA generate a root", c.GetPrivateKeyBits(), kt)
	}
	c.PrivateKeyType, c.PrivateKeyBits = kt.Algorithm, int32(kt.Bits)
	return nil
}

// checkLeafTTLAgainstRoot refuses a leaf_ttl that outlives the root that
// will sign: the supplied one, else the active one unless the change makes
// a new root (whose life, root_ttl, the settings' checks bound leaf_ttl by).
func checkLeafTTLAgainstRoot(c *pbca.CAConfig, supplied *suppliedRoot, active *pbca.CARoot, now time.Time) error {
	leaf := c.GetLeafTtl().AsDuration()
	switch {
	case supplied != nil:
		return ca.CheckLeafTTL(leaf, supplied.notAfter, now)
	case active == nil || !active.GetNotAfter().IsValid():
		return nil
	}
	if reason, err := ca.RotationReason(c, active); err != nil || reason != "" {
		return nil
	}
	return ca.CheckLeafTTL(leaf, active.GetNotAfter().AsTime(), now)
}

// rootSettings are the settings of a CAConfig that make or choose the
// root: in a secondary they are the primary's to change.
var rootSettings = []string{"root_cert", "private_key", "rotation", "private_key_type", "private_key_bits", "root_ttl"}

// checkSecondaryConfigChange refuses, in a secondary of the datacenter
// primary, a change of the configuration raw (as PUT /v1/ca/config takes
// it) to stored that would change a root: its roots are the primary's,
// and so is rotating them. Settings given with their stored value pass,
// so that an answer of GET sent back changes nothing.
func checkSecondaryConfigChange(stored *pbca.CAConfig, raw json.RawMessage, primary string) error {
	given, next, err := mergeConfig(stored, raw)
	if err != nil {
		return err
	}
	ca.FillConfigDefaults(next)
	was := proto.Clone(stored).(*pbca.CAConfig)
	ca.FillConfigDefaults(was)
	nm, wm := next.ProtoReflect(), was.ProtoReflect()
	for _, name := range rootSettings {
		if !given[name] {
			continue
		}
		fd := nm.Descriptor().Fields().ByName(protoreflect.Name(name))
		if !nm.Get(fd).Equal(wm.Get(fd)) {
			return resource.NewFieldError(name, "this datacenter is a secondary of %q, whose roots it uses: change the roots in the primary (its PUT /v1/ca/config, or trellis ca rotate against it), and this datacenter follows", primary)
		}
	}
	return nil
}
