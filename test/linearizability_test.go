package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"trellis.dev/trellis/internal/testcluster"
)

// registerInput is one operation on one key: a put of value, or a get.
type registerInput struct {
	key   string
	put   bool
	value string
}

// registerModel is a set of independent registers, one per key, each
// holding a Namespace's description ("" when the key was never written).
var registerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(registerInput).key
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
		in := input.(registerInput)
		if in.put {
			return true, in.value
		}
		return output.(string) == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(registerInput)
		if in.put {
			return fmt.Sprintf("put(%s, %s)", in.key, in.value)
		}
		return fmt.Sprintf("get(%s) -> %q", in.key, output)
	},
}

// history records operations with times relative to a common start.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) add(op porcupine.Operation) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// errUnknown marks a write whose outcome the client cannot know (the
// connection broke, or the server said the outcome is unknown).
var errUnknown = errors.New("outcome unknown")

// errNotApplied marks a write the server refused having written nothing:
// a blind upsert that kept losing compare-and-swap races (409 conflict).
var errNotApplied = errors.New("not applied")

var httpClient = &http.Client{Timeout: 5 * time.Second}

func putDescription(addr, key, value string) error {
	body, _ := json.Marshal(map[string]any{"data": map[string]string{"description": value}})
	req, _ := http.NewRequest(http.MethodPut, "http://"+addr+"/v1/resources/core/v1/Namespace/"+key, bytes.NewReader(body))
	resp, err := httpClient.Do(req)
	if err != nil {
		return errUnknown
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	switch {
	case resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode == http.StatusConflict:
		return errNotApplied
	case resp.StatusCode >= 500:
		// 503 may be "no leader, nothing written" or "leadership lost, the
		// outcome is unknown": the checker must allow both.
		return errUnknown
	default:
		return fmt.Errorf("put %s: %s: %s", key, resp.Status, b)
	}
}

func getDescription(addr, key string, consistent bool) (string, error) {
	url := "http://" + addr + "/v1/resources/core/v1/Namespace/" + key
	if consistent {
		url += "?consistent=1"
	}
	resp, err := httpClient.Get(url)
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

// TestLeaderKilledUnderWrites starts three servers, writes and reads from
// several clients through every server, kills the leader with SIGKILL in
// the middle, and checks that the whole history is linearizable: every
// acknowledged write survived and no read saw a value out of order.
func TestLeaderKilledUnderWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	ctx := context.Background()
	dir := t.TempDir()
	bin, err := testcluster.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := testcluster.Start(ctx, testcluster.Options{Bin: bin, Dir: dir, Servers: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			for _, m := range c.Members {
				b, _ := os.ReadFile(m.LogPath)
				t.Logf("--- %s log ---\n%s", m.Name, tail(b, 4000))
			}
		}
	})
	leader, err := c.WaitLeader(ctx, c.Members)
	if err != nil {
		t.Fatal(err)
	}

	keys := []string{"k0", "k1", "k2", "k3"}
	h := &history{start: time.Now()}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	acked := make([]int, 6)
	for client := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			target := client % len(c.Members)
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				m := c.Members[target]
				if !m.Running() {
					target = (target + 1) % len(c.Members)
					continue
				}
				key := keys[(client+seq)%len(keys)]
				if seq%3 == 2 {
					call := h.now()
					v, err := getDescription(m.HTTPAddr, key, true)
					if err != nil {
						continue // a failed read has no effect
					}
					h.add(porcupine.Operation{ClientId: client, Input: registerInput{key: key}, Call: call, Output: v, Return: h.now()})
					continue
				}
				value := fmt.Sprintf("c%d-%d", client, seq)
				call := h.now()
				err := putDescription(m.HTTPAddr, key, value)
				ret := h.now()
				switch {
				case err == nil:
					acked[client]++
				case errors.Is(err, errUnknown):
					ret = math.MaxInt64 // may take effect at any later time
				case errors.Is(err, errNotApplied):
					continue // no effect: like a failed read, not part of the history
				default:
					t.Errorf("client %d: %v", client, err)
					return
				}
				h.add(porcupine.Operation{ClientId: client, Input: registerInput{key: key, put: true, value: value}, Call: call, Output: "", Return: ret})
			}
		}()
	}

	waitAcked := func(n int) {
		t.Helper()
		err := testcluster.WaitFor(ctx, 60*time.Second, func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return len(h.ops) >= n
		})
		if err != nil {
			t.Fatalf("fewer than %d operations completed", n)
		}
	}
	waitAcked(300)
	t.Logf("killing leader %s", leader.Name)
	leader.Kill()
	var rest []*testcluster.Member
	for _, m := range c.Members {
		if m != leader {
			rest = append(rest, m)
		}
	}
	if _, err := c.WaitLeader(ctx, rest); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	n := len(h.ops)
	h.mu.Unlock()
	waitAcked(n + 300)
	close(stop)
	wg.Wait()

	// Final strong reads on each surviving server join the history.
	for _, m := range rest {
		for _, k := range keys {
			call := h.now()
			v, err := getDescription(m.HTTPAddr, k, true)
			if err != nil {
				t.Fatalf("final read on %s: %v", m.Name, err)
			}
			h.add(porcupine.Operation{ClientId: 6, Input: registerInput{key: k}, Call: call, Output: v, Return: h.now()})
		}
	}

	res, info := porcupine.CheckOperationsVerbose(registerModel, h.ops, 2*time.Minute)
	t.Logf("%d operations, acknowledged writes per client %v, check: %s", len(h.ops), acked, res)
	if res == porcupine.Illegal {
		f, err := os.CreateTemp("", "trellis-linearizability-*.html")
		if err == nil {
			_ = porcupine.Visualize(registerModel, info, f)
			f.Close()
			t.Logf("visualization: %s", f.Name())
		}
		t.Fatal("history is not linearizable")
	}

	// The killed server comes back with its data and catches up.
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, k := range keys {
		v, err := getDescription(rest[0].HTTPAddr, k, true)
		if err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	err = testcluster.WaitFor(ctx, 60*time.Second, func() bool {
		for _, k := range keys {
			if v, err := getDescription(leader.HTTPAddr, k, false); err != nil || v != want[k] {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("restarted server did not catch up to %v", want)
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
