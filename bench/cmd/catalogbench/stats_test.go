package main

import (
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, c := range []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{"none", nil, 0.5, 0},
		{"one", ms(7), 0.99, 7 * time.Millisecond},
		{"median of 4 is the 2nd", ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{"p99 of 100 is the 99th", ms(hundred...), 0.99, 99 * time.Millisecond},
		{"p50 of 100 is the 50th", ms(hundred...), 0.50, 50 * time.Millisecond},
		{"p99 of 10 is the max", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.99, 10 * time.Millisecond},
	} {
		if got := quantile(c.sorted, c.q); got != c.want {
			t.Errorf("%s: quantile(%v) = %v, want %v", c.name, c.q, got, c.want)
		}
	}
}

func TestSummarizeSortsACopy(t *testing.T) {
	d := []time.Duration{3, 1, 2}
	s := summarize(d)
	if s.n != 3 || s.p50 != 2 || s.max != 3 || s.p99 != 3 {
		t.Errorf("summarize = %+v", s)
	}
	if d[0] != 3 {
		t.Errorf("summarize sorted its argument: %v", d)
	}
}

func TestRatio(t *testing.T) {
	if got := ratio(3*time.Millisecond, 2*time.Millisecond); got != "1.50×" {
		t.Errorf("ratio = %q", got)
	}
	if got := ratio(time.Millisecond, 0); got != "–" {
		t.Errorf("ratio over zero = %q", got)
	}
}

func TestConsulIndex(t *testing.T) {
	if i, err := consulIndex("42"); err != nil || i != 42 {
		t.Errorf("consulIndex(42) = %d, %v", i, err)
	}
	for _, bad := range []string{"", "0", "-1", "x"} {
		if _, err := consulIndex(bad); err == nil {
			t.Errorf("consulIndex(%q): no error", bad)
		}
	}
}

func TestEntries(t *testing.T) {
	for _, c := range []struct {
		body string
		want int
	}{{"[]", 0}, {"null", 0}, {`[{"Node":{}},{"Node":{}}]`, 2}} {
		if n, err := entries([]byte(c.body)); err != nil || n != c.want {
			t.Errorf("entries(%s) = %d, %v; want %d", c.body, n, err, c.want)
		}
	}
	if _, err := entries([]byte(`{"a":1}`)); err == nil {
		t.Error("entries of an object: no error")
	}
}

func TestEtcdValueSize(t *testing.T) {
	if got := etcdValueSize(482532, 1000, 14); got != 468 {
		t.Errorf("etcdValueSize = %d, want 468", got)
	}
	if got := etcdValueSize(10, 1000, 14); got != 1 {
		t.Errorf("etcdValueSize of a tiny answer = %d, want 1", got)
	}
}

func TestParseVmRSS(t *testing.T) {
	rss, err := parseVmRSS("Name:\tetcd\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n")
	if err != nil || rss != 1024<<10 {
		t.Errorf("parseVmRSS = %d, %v", rss, err)
	}
	if _, err := parseVmRSS("Name:\tetcd\n"); err == nil {
		t.Error("parseVmRSS without VmRSS: no error")
	}
}
