package scheduler

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// TaskName is the name of the environment's seq-th task on instance:
// "<environment>-<12 hex digits of the instance's hash>-<seq>". It is the
// key that makes placement one and only one: a placement creates exactly
// this name, create-only, so two schedulers that decide on the same state
// write the same name and one of them fails; and seq only grows (the
// highest task of an instance is never deleted while the environment
// lives), so a name is never reused.
func TaskName(env, instance string, seq int64) string {
	return taskPrefix(env, instance) + strconv.FormatInt(seq, 10)
}

func taskPrefix(env, instance string) string {
	sum := sha256.Sum256([]byte(instance))
	return env + "-" + hex.EncodeToString(sum[:6]) + "-"
}

// TaskSeq returns the seq of a task name of env on instance, and false
// when the name is not one of them.
func TaskSeq(env, instance, name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, taskPrefix(env, instance))
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}
