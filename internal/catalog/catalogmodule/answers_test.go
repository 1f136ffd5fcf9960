package catalogmodule

import (
	"errors"
	"strings"
	"testing"
)

// builder returns a build of body that counts its calls in n.
func builder(n *int, body string, err error) func() ([]byte, error) {
	return func() ([]byte, error) {
		*n++
		if err != nil {
			return nil, err
		}
		return []byte(body), nil
	}
}

// One answer per service, key and indexes: built once, shared after; a
// newer index replaces it, an older one builds its own without replacing
// the newer; a change evicts it; a failed build is not kept.
func TestAnswerCacheSharesByIndex(t *testing.T) {
	c := newAnswerCache(1 << 20)
	key := newAnswerKey("health", consulQuery{passing: true, tags: []string{"b", "a", "b"}})
	if key != newAnswerKey("health", consulQuery{passing: true, tags: []string{"a", "b"}}) {
		t.Fatal("the same tags in another order are another key")
	}
	get := func(at answerIndexes, body string, err error) (string, int) {
		t.Helper()
		n := 0
		got, gotErr := c.get("default/db", key, at, builder(&n, body, err))
		if !errors.Is(gotErr, err) {
			t.Fatalf("get at %v: error %v, want %v", at, gotErr, err)
		}
		return string(got), n
	}
	if body, n := get(answerIndexes{5, 1}, "five", nil); body != "five" || n != 1 {
		t.Fatalf("first at 5: %q, built %d times", body, n)
	}
	if body, n := get(answerIndexes{5, 1}, "other", nil); body != "five" || n != 0 {
		t.Fatalf("again at 5: %q, built %d times; want the shared answer", body, n)
	}
	if body, n := get(answerIndexes{6, 1}, "six", nil); body != "six" || n != 1 {
		t.Fatalf("at 6: %q, built %d times", body, n)
	}
	if body, n := get(answerIndexes{5, 1}, "five again", nil); body != "five again" || n != 1 {
		t.Fatalf("at 5 after 6: %q, built %d times", body, n)
	}
	if body, n := get(answerIndexes{6, 1}, "other", nil); body != "six" || n != 0 {
		t.Fatalf("at 6 after a request at 5: %q, built %d times; want 6's kept", body, n)
	}
	if body, n := get(answerIndexes{6, 2}, "six, nodes 2", nil); body != "six, nodes 2" || n != 1 {
		t.Fatalf("at 6 after a node changed: %q, built %d times", body, n)
	}
	c.evict([]string{"default/db"})
	if c.bytes != 0 || len(c.byService) != 0 {
		t.Fatalf("after the service's change: %d bytes in %d services held", c.bytes, len(c.byService))
	}
	broken := errors.New("broken")
	if _, n := get(answerIndexes{7, 2}, "", broken); n != 1 {
		t.Fatalf("a failed build: built %d times", n)
	}
	if body, n := get(answerIndexes{7, 2}, "seven", nil); body != "seven" || n != 1 {
		t.Fatalf("after a failed build: %q, built %d times", body, n)
	}
	if c.served.Load() != 8 || c.built.Load() != 6 {
		t.Fatalf("served %d, built %d; want 8, 6", c.served.Load(), c.built.Load())
	}
}

// The answers held stay within the cache's bound, one answer over it
// included.
func TestAnswerCacheBounded(t *testing.T) {
	c := newAnswerCache(100)
	n := 0
	for _, svc := range []string{"a", "b", "c", "d"} {
		if _, err := c.get("default/"+svc, answerKey{route: "health"}, answerIndexes{1, 0}, builder(&n, strings.Repeat("x", 40), nil)); err != nil {
			t.Fatal(err)
		}
		if c.bytes > c.maxBytes {
			t.Fatalf("after %s: %d bytes held, over %d", svc, c.bytes, c.maxBytes)
		}
	}
	big, err := c.get("default/e", answerKey{route: "health"}, answerIndexes{1, 0}, builder(&n, strings.Repeat("x", 200), nil))
	if err != nil || len(big) != 200 {
		t.Fatalf("an answer over the bound = %d bytes, %v", len(big), err)
	}
	if c.bytes > c.maxBytes {
		t.Fatalf("after an answer over the bound: %d bytes held", c.bytes)
	}
	held := 0
	for _, answers := range c.byService {
		for _, a := range answers {
			held += a.size
		}
	}
	if held != c.bytes {
		t.Fatalf("the answers held are %d bytes, counted %d", held, c.bytes)
	}
}
