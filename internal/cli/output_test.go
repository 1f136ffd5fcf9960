package cli

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"trellis.dev/trellis/internal/httpapi/wire"
)

func TestFormatAge(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"}, {0, "0s"}, {45 * time.Second, "45s"}, {119 * time.Second, "119s"},
		{2 * time.Minute, "2m"}, {90 * time.Minute, "90m"}, {3 * time.Hour, "3h"}, {47 * time.Hour, "47h"},
		{72 * time.Hour, "3d"},
	} {
		if got := FormatAge(tc.d); got != tc.want {
			t.Errorf("FormatAge(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestWriteTable(t *testing.T) {
	now := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	uid := ulid.MustNew(ulid.Timestamp(now.Add(-90*time.Second)), bytes.NewReader(make([]byte, 16))).String()
	res := func(name, ns string) *wire.Resource {
		return &wire.Resource{ID: wire.ID{UID: uid, Name: name, Tenancy: wire.Tenancy{Namespace: ns}}, Version: "12", Generation: "3"}
	}
	var b bytes.Buffer
	if err := WriteTable(&b, []*wire.Resource{res("default", ""), res("payments", "")}, now); err != nil {
		t.Fatal(err)
	}
	want := "NAME       VERSION   GENERATION   AGE\n" +
		"default    12        3            90s\n" +
		"payments   12        3            90s\n"
	if b.String() != want {
		t.Fatalf("cluster-scoped table:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	bad := res("web", "prod")
	bad.ID.UID = "not-a-ulid"
	if err := WriteTable(&b, []*wire.Resource{bad}, now); err != nil {
		t.Fatal(err)
	}
	want = "NAME   NAMESPACE   VERSION   GENERATION   AGE\n" +
		"web    prod        12        3            -\n"
	if b.String() != want {
		t.Fatalf("namespaced table:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestWriteRawKeepsTheAPIsJSON(t *testing.T) {
	in := `{"id":{"name":"a"},"data":{"description":"x"},"generation":"1"}`
	for _, format := range []string{FormatJSON, FormatYAML} {
		var b bytes.Buffer
		if err := WriteRaw(&b, format, []byte(in)); err != nil {
			t.Fatal(err)
		}
		var got, want any
		js := b.Bytes()
		if format == FormatYAML {
			var err error
			if js, err = yamlToJSON(js); err != nil {
				t.Fatal(err)
			}
		}
		if err := json.Unmarshal(js, &got); err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal([]byte(in), &want)
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		if !bytes.Equal(gb, wb) {
			t.Errorf("%s round trip: %s, want %s", format, gb, wb)
		}
	}
}
