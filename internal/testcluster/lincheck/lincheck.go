// Package lincheck is the multi-process tests' and benchmarks' check that
// a cluster loses no acknowledged write and shows no read out of order:
// clients put and get Namespace descriptions through the HTTP API, each
// key a register, every operation is recorded with its call and return
// times, and porcupine (github.com/anishathalye/porcupine) decides whether
// some order of the operations, consistent with those times, explains
// every result. A write whose outcome the client cannot know (its
// connection broke, or the server said so) may take effect at any later
// time, or never; a write the server refused having written nothing is
// left out. It is apart from testcluster so that only its users pull in
// porcupine.
package lincheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Input is one operation on one key: a put of Value, or a get.
type Input struct {
	Key   string
	Put   bool
	Value string
}

// Model is a set of independent registers, one per key, each holding a
// Namespace's description ("" when the key was never written).
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(Input).Key
			byKey[k] = append(byKey[k], op)
		}
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(Input)
		if in.Put {
			return true, in.Value
		}
		return output.(string) == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(Input)
		if in.Put {
			return fmt.Sprintf("put(%s, %s)", in.Key, in.Value)
		}
		return fmt.Sprintf("get(%s) -> %q", in.Key, output)
	},
}

// ErrUnknown marks a write whose outcome the client cannot know (the
// connection broke, or the server said the outcome is unknown).
var ErrUnknown = errors.New("outcome unknown")

// ErrNotApplied marks a write the server refused having written nothing:
// a blind upsert that kept losing compare-and-swap races (409 conflict).
var ErrNotApplied = errors.New("not applied")

var client = &http.Client{Timeout: 5 * time.Second}

// PutDescription writes key's description through the server at addr
// (host:port of its HTTP API). The error is nil when the write was
// acknowledged, ErrUnknown or ErrNotApplied as above, or another error
// for an answer the checker has no meaning for.
func PutDescription(addr, key, value string) error {
	body, _ := json.Marshal(map[string]any{"data": map[string]string{"description": value}})
	req, err := http.NewRequest(http.MethodPut, "http://"+addr+"/v1/resources/core/v1/Namespace/"+key, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return ErrUnknown
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	switch {
	case resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode == http.StatusConflict:
		return ErrNotApplied
	case resp.StatusCode >= 500:
		// 503 may be "no leader, nothing written" or "leadership lost, the
		// outcome is unknown": the checker must allow both.
		return ErrUnknown
	default:
		return fmt.Errorf("put %s: %s: %s", key, resp.Status, b)
	}
}

// GetDescription reads key's description ("" when there is no such
// Namespace) through the server at addr, a strong read when consistent.
func GetDescription(addr, key string, consistent bool) (string, error) {
	url := "http://" + addr + "/v1/resources/core/v1/Namespace/" + key
	if consistent {
		url += "?consistent=1"
	}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return "", nil
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("get %s: %s: %s", key, resp.Status, b)
	}
	var res struct {
		Data struct {
			Description string `json:"description"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&res)
	return res.Data.Description, err
}

// History records operations with times relative to its start. It is
// safe for concurrent use.
type History struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

// NewHistory starts an empty history.
func NewHistory() *History { return &History{start: time.Now()} }

func (h *History) now() int64 { return int64(time.Since(h.start)) }

// Len is the number of operations recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

func (h *History) add(op porcupine.Operation) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// Put writes value to key through the server at addr and records the
// write as client's: acknowledged, or of unknown outcome (it may take
// effect at any later time). A write not applied is not recorded. The
// error is PutDescription's.
func (h *History) Put(clientID int, addr, key, value string) error {
	call := h.now()
	err := PutDescription(addr, key, value)
	ret := h.now()
	switch {
	case err == nil:
	case errors.Is(err, ErrUnknown):
		ret = math.MaxInt64
	default:
		return err
	}
	h.add(porcupine.Operation{ClientId: clientID, Input: Input{Key: key, Put: true, Value: value}, Call: call, Output: "", Return: ret})
	return err
}

// Get reads key through the server at addr and records the read as
// client's when it succeeds (a failed read has no effect).
func (h *History) Get(clientID int, addr, key string, consistent bool) (string, error) {
	call := h.now()
	v, err := GetDescription(addr, key, consistent)
	if err != nil {
		return "", err
	}
	h.add(porcupine.Operation{ClientId: clientID, Input: Input{Key: key}, Call: call, Output: v, Return: h.now()})
	return v, nil
}

// Check decides whether the history is linearizable, within timeout
// (porcupine.Unknown when it ran out). On porcupine.Illegal, visualization
// names an HTML file that shows why (empty if it could not be written).
func (h *History) Check(timeout time.Duration) (res porcupine.CheckResult, visualization string) {
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	res, info := porcupine.CheckOperationsVerbose(Model, ops, timeout)
	if res == porcupine.Illegal {
		if f, err := os.CreateTemp("", "trellis-linearizability-*.html"); err == nil {
			if porcupine.Visualize(Model, info, f) == nil {
				visualization = f.Name()
			}
			f.Close()
		}
	}
	return res, visualization
}
