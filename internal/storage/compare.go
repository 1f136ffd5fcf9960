package storage

import (
	"fmt"
	"strconv"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
)

// The decisions of a batch's compares (pbresource.Compare), over plain
// values: the backends check them on their state inside the batch's
// atomic step; the resource service checks them again on what it reads,
// to say which one failed.

// ComparePoint decides a compare on one name (OP_VERSION, OP_ABSENT,
// OP_EXISTS) against what is stored there, nil for nothing. The error
// wraps ErrCompareFailed and says why.
func ComparePoint(c *pbresource.Compare, stored *pbresource.Resource) error {
	uid := c.GetId().GetUid()
	switch c.GetOp() {
	case pbresource.Compare_OP_VERSION, pbresource.Compare_OP_EXISTS:
		if stored == nil {
			return fmt.Errorf("%w: it does not exist", ErrCompareFailed)
		}
		if uid != "" && uid != stored.GetId().GetUid() {
			return fmt.Errorf("%w: it has uid %s, not %s: it was deleted and re-created", ErrCompareFailed, stored.GetId().GetUid(), uid)
		}
		if c.GetOp() == pbresource.Compare_OP_VERSION && stored.GetVersion() != c.GetVersion() {
			return fmt.Errorf("%w: it is at version %s, not %s", ErrCompareFailed, stored.GetVersion(), c.GetVersion())
		}
		return nil
	case pbresource.Compare_OP_ABSENT:
		if stored != nil {
			return fmt.Errorf("%w: it exists (version %s)", ErrCompareFailed, stored.GetVersion())
		}
		return nil
	}
	return fmt.Errorf("%w: compare op %v is not one of a name", ErrCompareFailed, c.GetOp())
}

// CompareNothingNewer decides an OP_NOTHING_NEWER compare against the
// resources stored in its range (its type, tenancy and name prefix).
// When several are newer it names the first by namespace and name, so
// that every server says the same whatever order it found them in.
func CompareNothingNewer(c *pbresource.Compare, inRange []*pbresource.Resource) error {
	limit, err := CompareSince(c.GetVersion())
	if err != nil {
		return err
	}
	var first *pbresource.Resource
	for _, res := range inRange {
		if v, _ := strconv.ParseUint(res.GetVersion(), 10, 64); v <= limit {
			continue
		}
		if first == nil || before(res.GetId(), first.GetId()) {
			first = res
		}
	}
	if first != nil {
		return fmt.Errorf("%w: %s was written at version %s, after %d", ErrCompareFailed, ids.String(first.GetId()), first.GetVersion(), limit)
	}
	return nil
}

// CompareSince parses the version of an OP_NOTHING_NEWER compare: a
// store index, or empty for 0 (nothing may be stored in the range).
func CompareSince(v string) (uint64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: version %q is not a store version", ErrCompareFailed, v)
	}
	return n, nil
}

func before(a, b *pbresource.ID) bool {
	if an, bn := a.GetTenancy().GetNamespace(), b.GetTenancy().GetNamespace(); an != bn {
		return an < bn
	}
	return a.GetName() < b.GetName()
}
