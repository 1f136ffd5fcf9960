package ca

import (
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/resource"
)

// The CA's resource types. See api/ca/v1/ca.proto for their fields.
var (
	// ConfigType is ca/v1/CAConfig: one resource, ConfigName.
	ConfigType = &pbresource.Type{Group: "ca", GroupVersion: "v1", Kind: "CAConfig"}
	// RootType is ca/v1/CARoot: one per root, named RootName(id).
	RootType = &pbresource.Type{Group: "ca", GroupVersion: "v1", Kind: "CARoot"}
	// SigningKeyType is ca/v1/CASigningKey, sealed: one per root, named as
	// the root.
	SigningKeyType = &pbresource.Type{Group: "ca", GroupVersion: "v1", Kind: "CASigningKey"}
)

// ConfigName is the name of the one CAConfig.
const ConfigName = "default"

// ManagerStatusKey is the status key under which the CA manager reports
// on the CAConfig (a CAManagerStatus).
const ManagerStatusKey = "ca-manager"

// The CA manager's states (CAManagerStatus.state).
const (
	StateInitializing = "initializing"
	StateReady        = "ready"
	StateFailed       = "failed"
)

// ProviderBuiltin is the CA provider that generates or takes a root and
// signs with it in the servers: the only one for now.
const ProviderBuiltin = "builtin"

// Defaults MutateConfig fills in, and bounds ValidateConfig checks.
const (
	// DefaultLeafTTL is the life of a leaf: three days, renewed by agents
	// at 60-90 % of it, so a leaf outlives a weekend's outage of the
	// servers.
	DefaultLeafTTL = 72 * time.Hour
	// MinLeafTTL: below an hour, renewals at 60-90 % of the life would
	// make the signing load follow the fleet's size too closely.
	MinLeafTTL = time.Hour
	// DefaultIntermediateTTL is the life of an intermediate (a
	// secondary's, a signing certificate): a year, renewed at half life.
	DefaultIntermediateTTL = 365 * 24 * time.Hour
	// DefaultRootTTL is the life of a generated root: ten years.
	DefaultRootTTL = 87600 * time.Hour

	// DefaultCSRMaxPerSecond is the signatures one server makes per second
	// by default. This CA must never be the bottleneck (Consul's default of
	// 50/s is): one P-256 signature and certificate cost about a tenth of
	// a millisecond of one core, so a 2-core server signs a few thousand a
	// second. The default sits above that, so the CPU, not the limiter,
	// bounds normal load; the limiter is there for an operator who wants a
	// lower ceiling, and to answer a storm with 429 instead of a queue.
	DefaultCSRMaxPerSecond = 10000
	// DefaultCSRMaxConcurrent is the signatures one server makes at once:
	// enough to keep every core busy while requests wait on the network,
	// and few enough that a storm is refused (ResourceExhausted) rather
	// than queued without bound.
	DefaultCSRMaxConcurrent = 64

	// DefaultPrivateKeyType and DefaultPrivateKeyBits: ECDSA P-256.
	DefaultPrivateKeyType = "ec"
	DefaultPrivateKeyBits = 256
)

// ConfigID returns the id of the CAConfig.
func ConfigID() *pbresource.ID { return clusterID(ConfigType, ConfigName) }

// RootID returns the id of the CARoot called name (see RootName).
func RootID(name string) *pbresource.ID { return clusterID(RootType, name) }

// SigningKeyID returns the id of the CASigningKey called name: the name of
// its root.
func SigningKeyID(name string) *pbresource.ID { return clusterID(SigningKeyType, name) }

func clusterID(t *pbresource.Type, name string) *pbresource.ID {
	return &pbresource.ID{Type: t, Tenancy: &pbresource.Tenancy{}, Name: name}
}

// rootNameLength is the hex digits of a key id a root's name keeps: 128
// bits, as unique as a uuid, within the 63 characters of a name (the whole
// SHA-256 is 64 digits).
const rootNameLength = 32

// RootName is the resource name of the root whose key id (ab:cd:..., see
// KeyID) is keyID: its first 32 hex digits, colons removed. It is "" when
// keyID is too short to name one.
func RootName(keyID string) string {
	b := make([]byte, 0, rootNameLength)
	for i := 0; i < len(keyID) && len(b) < rootNameLength; i++ {
		if keyID[i] != ':' {
			b = append(b, keyID[i])
		}
	}
	if len(b) < rootNameLength {
		return ""
	}
	return string(b)
}

// Register registers the CA's types.
//
// CAConfig is set through the CA's own route (/v1/ca/config), which takes
// a supplied private key out of it and stores it as a sealed CASigningKey:
// the generic API never writes one, nor deletes it. CARoots are written
// and deleted by the CA manager alone (the generic delete of the active
// one says to rotate); anyone may read them, since a root is what every
// peer must trust and holds no secret. CASigningKey is sealed: no API
// ever returns or deletes it.
func Register(r *resource.Registry) {
	anyone := func(acl.Authorizer, *pbresource.ID) error { return nil }
	r.Register(resource.Registration{
		Type:           ConfigType,
		Proto:          &pbca.CAConfig{},
		Scope:          resource.ScopeCluster,
		Mutate:         MutateConfig,
		Validate:       ValidateConfig,
		WrittenThrough: "/v1/ca/config",
		DeletedThrough: "the CA's configuration is never deleted (the CA manager would write a default one in its place and rotate to a new generated root); change it with PUT /v1/ca/config (trellis ca config set)",
		Statuses: map[string]resource.StatusPayload{
			ManagerStatusKey: {Owner: resource.StatusOwner{Controller: ManagerStatusKey}, Proto: &pbca.CAManagerStatus{}, Validate: ValidateManagerStatus},
		},
	})
	r.Register(resource.Registration{
		Type:           RootType,
		Proto:          &pbca.CARoot{},
		Scope:          resource.ScopeCluster,
		Validate:       ValidateRoot,
		WrittenThrough: "/v1/ca/roots (the CA manager alone makes, rotates and prunes roots)",
		DeletedThrough: "the CA manager alone deletes a root rotated out, with its signing key, 2 × leaf_ttl after the rotation, once no leaf it signed can still be valid: deleted sooner, those leaves would stop verifying",
		DeleteRefusal:  RefuseActiveRootDelete,
		ACLs: &resource.ACLHooks{
			Read: anyone,
			List: func(acl.Authorizer, *pbresource.Tenancy) error { return nil },
		},
	})
	r.Register(resource.Registration{
		Type:     SigningKeyType,
		Proto:    &pbca.CASigningKey{},
		Scope:    resource.ScopeCluster,
		Validate: ValidateSigningKey,
		Sealed:   true,
	})
}

// RefuseActiveRootDelete is the CARoot's refusal of a generic delete
// (resource.Registration.DeleteRefusal) when the root is the active one:
// every leaf in the cluster chains to it, and the manager would make a new
// root with no cross-signature at once, so a rotation is the only way to
// replace it. A root rotated out, or data it cannot decode, gets the usual
// refusal (nil).
func RefuseActiveRootDelete(stored *pbresource.Resource) error {
	root, err := resource.DecodeData[*pbca.CARoot](stored)
	if err != nil || !root.GetActive() {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition, "%s is the CA's active root: every leaf chains to it, so it is never deleted; rotate to a new root instead (trellis ca rotate, which raises rotation through PUT /v1/ca/config): the new root is cross-signed by this one, and the CA manager prunes this one 2 × leaf_ttl after the rotation", ids.String(stored.GetId()))
}
