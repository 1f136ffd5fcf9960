// Package storagetest is the conformance suite for storage.Backend: one set
// of tests that every implementation must pass, run against the in-memory
// backend, a Raft leader and a Raft follower (STYLE.md item 11).
//
// The suite tests the contract written in storage.Backend's comments and
// nothing an implementation happens to do beyond it. In particular:
//
//   - Writes may be forwarded (a follower sends them to the leader), so every
//     result is checked with a StrongConsistency read. EventualConsistency
//     reads, ListByOwner (which has no consistency argument) and the snapshot
//     a new watch starts from may lag; the suite waits until the local copy
//     has applied a known write (polling with a deadline) before asserting on
//     them, and never assumes a write is visible locally at once.
//   - Versions are opaque strings: the suite checks that they change on every
//     write and are never reused, not what they look like. Batch members share
//     one version.
//   - Watch events are waited for with a deadline, so a missing event fails
//     the test instead of hanging it. An event that must not arrive is checked
//     by ordering: the unwanted writes are made first and a wanted one last,
//     and the next event must be the wanted one.
//   - A watch that is asked to resume from an index whose events are gone may
//     refuse in WatchList or in its first Next; both are accepted, since a
//     remote backend can only report it when its stream starts.
//
// Where the contract's words leave room, the suite holds backends to this
// reading of them:
//
//   - WriteCAS and WriteBatch do not change their arguments, and what they
//     store does not change when the caller later changes the argument.
//   - An update whose uid differs from the stored one, an empty uid included,
//     fails with ErrWrongUID when its version matches.
//   - A refused batch's error wraps ErrBatchConflict and its text contains the
//     failing member's name. A batch naming one resource twice fails with
//     some error and stores nothing.
//   - ListByOwner matches the owner's uid exactly: an id without a uid owns
//     nothing.
//   - A DELETE event carries the deleted resource's id, uid included; its
//     version is not checked.
//   - Batch members' events share one index; every other event's index is
//     above the one before, and above its watch's END_OF_SNAPSHOT index, which
//     (like any event's index) may be passed as sinceIndex to resume after it.
//     sinceIndex 0 asks for a new snapshot, so the suite makes a change before
//     taking a snapshot it will resume from.
//   - Next returns an error wrapping context.Canceled or DeadlineExceeded
//     when its context ends with nothing due, and the watch goes on. After
//     Close, Next may still return events that were already due, then
//     returns an error, without blocking; Close also ends a Next waiting in another
//     goroutine, and a second Close is harmless.
//
// A backend package runs it from a test:
//
//	func TestConformance(t *testing.T) {
//		storagetest.Test(t, storagetest.Options{
//			NewBackend: func(t *testing.T) storage.Backend { return newBackendForTest(t) },
//		})
//	}
//
// Every subtest builds its own backend with Options.NewBackend and uses its
// own resource types, so subtests share nothing and a failure names exactly
// the rule that broke.
package storagetest
