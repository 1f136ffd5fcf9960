// Package reaper is the owner reaper: the controller that deletes resources
// whose owner no longer exists, which is how deleting an owner deletes what
// it owns (the resource service only deletes the one resource it is asked
// to).
//
// A resource names its owner by id and uid: one incarnation of the owner.
// The owner is fixed when the resource is created. So "the owner no longer
// exists" means: nothing is stored under the owner's name, or something is
// but with another uid (the owner was deleted and re-created, and the new
// one is not the owner).
//
// The reaper reconciles owners, keyed by uid, not the owned resources: a
// change to any resource asks for a reconcile of its owner, and the
// deletion of any resource asks for a reconcile of that (deleted)
// incarnation. Reconciling an owner incarnation reads the owner's name; if
// that incarnation is stored, nothing happens, otherwise every resource
// that names it as owner is deleted. Each of those deletions is a change
// too, so what they owned is reaped in turn: deletion is transitive, one
// level per reconcile. Keying by uid is what lets the reaper tell the owned
// resources of a deleted incarnation from those of its successor, which
// share the name.
//
// Nothing is lost across a change of leader: a new leader's watches begin
// with every resource, and every resource with an owner asks for that
// owner's reconcile, which finds the owners deleted while no one was
// reaping.
//
// The reaper does not delete when it cannot be sure: when the owner's type
// is not registered (it cannot read the owner, so it cannot know), it
// reports a terminal error and leaves the owned resources alone.
package reaper
