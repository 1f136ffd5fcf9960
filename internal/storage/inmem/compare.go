package inmem

import (
	"fmt"
	"unsafe"

	pbresource "trellis.dev/trellis/api/resource/v1"
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
			return &batchError{part: "compare", index: i, id: c.GetId(), err: fmt.Errorf("%w: it names no type", storage.ErrCompareFailed)}
		}
		if c.GetOp() == pbresource.Compare_OP_NOTHING_NEWER {
			err = tx.checkNothingNewer(c)
		} else {
			var stored *pbresource.Resource
			if stored, err = tx.lookup(nameKey(c.GetId())); err == nil {
				err = storage.ComparePoint(c, stored)
			}
		}
		if err != nil {
			return &batchError{part: "compare", index: i, id: c.GetId(), err: err}
		}
	}
	return nil
}

// checkNothingNewer checks an OP_NOTHING_NEWER compare against the
// group's state: what it stored before, less the names the group changed,
// and what the group wrote.
func (tx *Tx) checkNothingNewer(c *pbresource.Compare) error {
	id := c.GetId()
	typ, tenancy, prefix := id.GetType(), id.GetTenancy(), id.GetName()
	inRange, err := list(tx.before, typ, tenancy, prefix)
	if err != nil {
		return err
	}
	if len(tx.written) > 0 {
		kept := inRange[:0:0]
		for _, res := range inRange {
			key := nameKey(res.GetId())
			if _, changed := tx.written[unsafe.String(unsafe.SliceData(key), len(key))]; !changed {
				kept = append(kept, res)
			}
		}
		for _, res := range tx.written {
			if res != nil && storage.Matches(res, typ, tenancy, prefix) {
				kept = append(kept, res)
			}
		}
		inRange = kept
	}
	return storage.CompareNothingNewer(c, inRange)
}
