package storagetest

import (
	"testing"

	"trellis.dev/trellis/internal/storage"
)

// Options says how to build the backends under test.
type Options struct {
	// NewBackend returns a new, empty backend. It is called once per
	// subtest; release what it starts with t.Cleanup.
	NewBackend func(t *testing.T) storage.Backend

	// NewBackendWithEventHistory, when set, returns a new, empty backend that
	// keeps only the last events changes for resuming watches (at least one).
	// The subtest for storage.ErrIndexTooOld needs it and is skipped without.
	NewBackendWithEventHistory func(t *testing.T, events int) storage.Backend
}

type subtest struct {
	name string
	run  func(t *testing.T, b storage.Backend)
}

// subtests is the suite, in the order the contract is written.
var subtests = []subtest{
	{"Read/NotFound", testReadNotFound},
	{"Read/WrongUID", testReadWrongUID},
	{"Read/EventualConverges", testReadEventualConverges},

	{"WriteCAS/Create", testWriteCreate},
	{"WriteCAS/CreateWithVersion", testWriteCreateWithVersion},
	{"WriteCAS/CreateOverExisting", testWriteCreateOverExisting},
	{"WriteCAS/Update", testWriteUpdate},
	{"WriteCAS/StaleVersion", testWriteStaleVersion},
	{"WriteCAS/WrongUID", testWriteWrongUID},
	{"WriteCAS/VersionsNeverRepeat", testWriteVersionsNeverRepeat},

	{"WriteBatch/AllStoredWithOneVersion", testBatchAll},
	{"WriteBatch/StaleMemberStoresNothing", testBatchStaleMember},
	{"WriteBatch/WrongUIDMemberStoresNothing", testBatchWrongUIDMember},
	{"WriteBatch/DuplicateRefused", testBatchDuplicate},
	{"WriteBatch/ComparesHold", testCompareAllHold},
	{"WriteBatch/FailedCompareStoresNothing", testCompareFailsStoresNothing},
	{"WriteBatch/ComparesSeeStateBeforeWrites", testCompareSeesStateBeforeWrites},
	{"WriteBatch/NothingNewerScope", testCompareNothingNewerScope},

	{"DeleteCAS/MatchingVersion", testDeleteMatchingVersion},
	{"DeleteCAS/AnyVersion", testDeleteAnyVersion},
	{"DeleteCAS/StaleVersion", testDeleteStaleVersion},
	{"DeleteCAS/Idempotent", testDeleteIdempotent},
	{"DeleteCAS/OldUID", testDeleteOldUID},

	{"List/Queries", testListQueries},
	{"List/AfterChanges", testListAfterChanges},
	{"ListByOwner", testListByOwner},

	{"WatchList/SnapshotThenChanges", testWatchSnapshotThenChanges},
	{"WatchList/Filters", testWatchFilters},
	{"WatchList/BatchSharesIndex", testWatchBatch},
	{"WatchList/Resume", testWatchResume},
	{"WatchList/Close", testWatchClose},
	{"WatchList/NextContextEnds", testWatchNextContext},
}

// Test runs the conformance suite. Each subtest gets its own backend.
func Test(t *testing.T, opts Options) {
	if opts.NewBackend == nil {
		t.Fatal("storagetest: Options.NewBackend is nil")
	}
	for _, st := range subtests {
		t.Run(st.name, func(t *testing.T) {
			st.run(t, opts.NewBackend(t))
		})
	}
	t.Run("WatchList/IndexTooOld", func(t *testing.T) {
		if opts.NewBackendWithEventHistory == nil {
			t.Skip("Options.NewBackendWithEventHistory is not set")
		}
		testWatchIndexTooOld(t, opts.NewBackendWithEventHistory)
	})
}
