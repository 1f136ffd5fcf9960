package camodule_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"trellis.dev/trellis/internal/ca/camodule"
)

// getIndexed is a GET of the roots that returns the answer and its index.
func getIndexed(t *testing.T, url string) (int, camodule.RootsBody, uint64, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Error(err)
		return 0, camodule.RootsBody{}, 0, ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Error(err)
	}
	var body camodule.RootsBody
	var index uint64
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &body); err != nil {
			t.Errorf("%s: %v", b, err)
		}
		if index, err = strconv.ParseUint(resp.Header.Get(camodule.IndexHeader), 10, 64); err != nil || index == 0 {
			t.Errorf("%s = %q, want the store index", camodule.IndexHeader, resp.Header.Get(camodule.IndexHeader))
		}
	}
	return resp.StatusCode, body, index, string(b)
}

// A blocking read of the roots answers when the roots change after the
// index given, with the new roots and a newer index; with no change, when
// its wait is over, with the roots as they are; and at once for an index
// the roots changed after.
func TestRootsBlockUntilTheyChange(t *testing.T) {
	_, base, first := readyServer(t)
	code, now, index, body := getIndexed(t, base+"/v1/ca/roots")
	if code != http.StatusOK || now.ActiveRootID != first.ActiveRootID {
		t.Fatalf("GET = %d %s", code, body)
	}
	code, same, _, body := getIndexed(t, base+"/v1/ca/roots?index="+strconv.FormatUint(index, 10)+"&wait=50ms")
	if code != http.StatusOK || same.ActiveRootID != first.ActiveRootID || len(same.Roots) != 1 {
		t.Fatalf("a wait without a change = %d %s, want the same roots", code, body)
	}
	if code, old, _, body := getIndexed(t, base+"/v1/ca/roots?index=1&wait=10m"); code != http.StatusOK || old.ActiveRootID != first.ActiveRootID {
		t.Fatalf("index 1, which the roots changed after = %d %s, want the roots at once", code, body)
	}

	type answer struct {
		code  int
		body  camodule.RootsBody
		index uint64
	}
	done := make(chan answer, 1)
	go func() {
		code, body, at, _ := getIndexed(t, base+"/v1/ca/roots?index="+strconv.FormatUint(index, 10)+"&wait=5m")
		done <- answer{code, body, at}
	}()
	if code, body := put(t, base+"/v1/ca/config", map[string]any{"config": map[string]any{"rotation": 1}}); code != http.StatusOK {
		t.Fatalf("PUT rotation = %d %s", code, body)
	}
	got := <-done
	if got.code != http.StatusOK || got.body.ActiveRootID == first.ActiveRootID || len(got.body.Roots) != 2 || got.index <= index {
		t.Fatalf("the blocking read = %d, %+v at %d; want the rotated roots after %d", got.code, got.body, got.index, index)
	}
}

// The blocking read's parameters are checked, each refusal naming its
// parameter.
func TestRootsBlockingParams(t *testing.T) {
	_, base, _ := readyServer(t)
	for q, field := range map[string]string{
		"index=abc":         "index",
		"index=-1":          "index",
		"wait=1s":           "wait",
		"index=5&wait=soon": "wait",
		"index=5&wait=-1s":  "wait",
		"index=5&wait=11m":  "wait",
		"since=5":           "query",
	} {
		code, _, _, body := getIndexed(t, base+"/v1/ca/roots?"+q)
		if code != http.StatusBadRequest || !strings.Contains(body, `"`+field+`: `) {
			t.Errorf("?%s = %d %s, want 400 naming %s", q, code, body, field)
		}
	}
}
