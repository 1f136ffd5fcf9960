package inmem

import (
	"fmt"
	"strconv"
	"unsafe"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

// The compares of a batch (pbresource.Compare) are checked against the
// group's state before the batch's writes: what the transaction's earlier
// changes left, else what was stored before the group.

// checkCompares returns the error of the first compare that does not hold.
func (tx *Tx) checkCompares(compares []*pbresource.Compare) error {
	for i, c := range compares {
		var err error
		if c.GetId().GetType() == nil {
			return &compareError{member: i, id: c.GetId(), err: fmt.Errorf("%w: it names no type", storage.ErrCompareFailed)}
		}
		if c.GetOp() == pbresource.Compare_OP_NOTHING_NEWER {
			err = tx.checkNothingNewer(c)
		} else {
			var stored *pbresource.Resource
			if stored, err = tx.lookup(nameKey(c.GetId())); err == nil {
				err = comparePoint(c, stored)
			}
		}
		if err != nil {
			return &compareError{member: i, id: c.GetId(), err: err}
		}
	}
	return nil
}

// comparePoint decides a compare on one name against what is stored
// there (nil: nothing). It is pure.
func comparePoint(c *pbresource.Compare, stored *pbresource.Resource) error {
	uid := c.GetId().GetUid()
	switch c.GetOp() {
	case pbresource.Compare_OP_VERSION, pbresource.Compare_OP_EXISTS:
		if stored == nil {
			return fmt.Errorf("%w: it does not exist", storage.ErrCompareFailed)
		}
		if uid != "" && uid != stored.GetId().GetUid() {
			return fmt.Errorf("%w: it has uid %s, not %s: it was deleted and re-created", storage.ErrCompareFailed, stored.GetId().GetUid(), uid)
		}
		if c.GetOp() == pbresource.Compare_OP_VERSION && stored.GetVersion() != c.GetVersion() {
			return fmt.Errorf("%w: it is at version %s, not %s", storage.ErrCompareFailed, stored.GetVersion(), c.GetVersion())
		}
		return nil
	case pbresource.Compare_OP_ABSENT:
		if stored != nil {
			return fmt.Errorf("%w: it exists (version %s)", storage.ErrCompareFailed, stored.GetVersion())
		}
		return nil
	}
	return fmt.Errorf("%w: unknown compare op %v", storage.ErrCompareFailed, c.GetOp())
}

// checkNothingNewer checks that no resource of the compare's type in its
// tenancy, whose name begins with its id's name, is stored at a version
// later than the compare's. When several are, it names the first by name,
// so that every server, whatever its grouping of entries, says the same.
func (tx *Tx) checkNothingNewer(c *pbresource.Compare) error {
	limit, err := compareVersion(c.GetVersion())
	if err != nil {
		return err
	}
	id := c.GetId()
	typ, tenancy, prefix := id.GetType(), id.GetTenancy(), id.GetName()
	var first *pbresource.Resource
	consider := func(res *pbresource.Resource) {
		if v, _ := strconv.ParseUint(res.GetVersion(), 10, 64); v <= limit {
			return
		}
		if first == nil || string(nameKey(res.GetId())) < string(nameKey(first.GetId())) {
			first = res
		}
	}
	before, err := list(tx.before, typ, tenancy, prefix)
	if err != nil {
		return err
	}
	for _, res := range before {
		key := nameKey(res.GetId())
		if _, changed := tx.written[unsafe.String(unsafe.SliceData(key), len(key))]; !changed {
			consider(res) // the group's own changes are looked at below
		}
	}
	for _, res := range tx.written {
		if res != nil && storage.Matches(res, typ, tenancy, prefix) {
			consider(res)
		}
	}
	if first != nil {
		return fmt.Errorf("%w: %s was written at version %s, after %d", storage.ErrCompareFailed, ids.String(first.GetId()), first.GetVersion(), limit)
	}
	return nil
}

// compareVersion parses the version of an OP_NOTHING_NEWER compare: a
// store index, or empty for 0 (nothing may be stored at all).
func compareVersion(v string) (uint64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: version %q is not a store version", storage.ErrCompareFailed, v)
	}
	return n, nil
}

// compareError names the compare of a batch that did not hold.
type compareError struct {
	member int
	id     *pbresource.ID
	err    error
}

func (e *compareError) Error() string {
	return fmt.Sprintf("%s: compare %d (%s): %v", storage.ErrBatchConflict, e.member, ids.String(e.id), e.err)
}

func (e *compareError) Unwrap() []error { return []error{storage.ErrBatchConflict, e.err} }
