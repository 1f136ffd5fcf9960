package operations

import (
	"errors"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/scheduler"
)

// An environment's create or update checks that no other daemon
// environment of its namespace can overlap it, and writes its change in a
// batch with a compare that nothing of the environments it checked has
// changed since (none created, none updated): the check and the write
// cannot be split by another create or update, which then fails its
// compare and checks again. This is what an EnvironmentGuard per
// namespace, bumped by every checked write, used to serialize.

// errChecksStale: an environment of the namespace was written between an
// operation's checks and its write; the operation starts over.
var errChecksStale = errors.New("another environment of the namespace changed while this one was checked")

// maxCheckTries bounds how often an operation starts over for that. The
// controller's own writes to environments (a deployment starting or
// ending) move the namespace's environments too, so this is not only
// other operations.
const maxCheckTries = 8

// rechecked runs op until it ends other than by errChecksStale.
func rechecked(op func() (*EnvironmentResult, error)) (*EnvironmentResult, error) {
	for try := 1; ; try++ {
		r, err := op()
		if !errors.Is(err, errChecksStale) {
			return r, err
		}
		if try == maxCheckTries {
			return nil, status.Errorf(codes.Aborted, "the environments of the namespace kept changing while this one was checked (%d tries); retry", try)
		}
	}
}

// environmentsUnchanged is the compare that the environments of namespace
// ns are as a List read them: nothing of them written after the largest
// version it returned.
func environmentsUnchanged(ns string, listed []*pbresource.Resource) *pbresource.Compare {
	var newest uint64
	for _, r := range listed {
		if v, err := strconv.ParseUint(r.GetVersion(), 10, 64); err == nil {
			newest = max(newest, v)
		}
	}
	return &pbresource.Compare{
		Op:      pbresource.Compare_OP_NOTHING_NEWER,
		Id:      &pbresource.ID{Type: scheduler.EnvironmentType, Tenancy: &pbresource.Tenancy{Namespace: ns}},
		Version: strconv.FormatUint(newest, 10),
	}
}
