package lincheck

import (
	"math"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The checker's verdicts on small histories: what losing an acknowledged
// write, or reading out of order, looks like, and what a write of unknown
// outcome allows.
func TestModelVerdicts(t *testing.T) {
	put := func(client int, key, v string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: Input{Key: key, Put: true, Value: v}, Call: call, Return: ret, Output: ""}
	}
	get := func(client int, key, v string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: Input{Key: key}, Call: call, Return: ret, Output: v}
	}
	const never = math.MaxInt64
	cases := []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"a read sees the acknowledged write", []porcupine.Operation{put(0, "k", "a", 0, 10), get(1, "k", "a", 20, 30)}, porcupine.Ok},
		{"an acknowledged write lost", []porcupine.Operation{put(0, "k", "a", 0, 10), put(0, "k", "b", 20, 30), get(1, "k", "a", 40, 50)}, porcupine.Illegal},
		{"a key never written reads empty", []porcupine.Operation{get(1, "k", "", 0, 10)}, porcupine.Ok},
		{"an acknowledged write unseen", []porcupine.Operation{put(0, "k", "a", 0, 10), get(1, "k", "", 20, 30)}, porcupine.Illegal},
		{"concurrent writes, either order", []porcupine.Operation{put(0, "k", "a", 0, 30), put(1, "k", "b", 10, 20), get(2, "k", "a", 40, 50)}, porcupine.Ok},
		{"a write of unknown outcome may never happen", []porcupine.Operation{put(0, "k", "a", 0, 10), put(0, "k", "b", 20, never), get(1, "k", "a", 40, 50)}, porcupine.Ok},
		{"or happen late", []porcupine.Operation{put(0, "k", "a", 0, 10), put(0, "k", "b", 20, never), get(1, "k", "a", 40, 50), get(1, "k", "b", 60, 70)}, porcupine.Ok},
		{"but not be undone", []porcupine.Operation{put(0, "k", "a", 0, 10), put(0, "k", "b", 20, never), get(1, "k", "b", 40, 50), get(1, "k", "a", 60, 70)}, porcupine.Illegal},
		{"keys are independent", []porcupine.Operation{put(0, "k", "a", 0, 10), put(1, "j", "b", 0, 10), get(2, "k", "a", 20, 30), get(2, "j", "b", 20, 30)}, porcupine.Ok},
	}
	for _, c := range cases {
		if got := porcupine.CheckOperationsTimeout(Model, c.ops, 10*time.Second); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
