package markdown

import (
	"strings"
	"testing"
)

const doc = "# Title\n" +
	"intro\n" +
	"## Try it\n" +
	"run this:\n" +
	"```sh\n" +
	"# a comment, not a heading\n" +
	"echo hi\n" +
	"```\n" +
	"### Deeper\n" +
	"- a list\n" +
	"  ```console\n" +
	"  $ trellis version\n" +
	"  ```\n" +
	"## Try it again\n" +
	"```\n" +
	"plain\n" +
	"```\n" +
	"#not a heading\n" +
	"# Next\n"

func TestSectionsAndBlocks(t *testing.T) {
	tries := Sections(doc, func(title string) bool { return strings.HasPrefix(title, "Try it") })
	if len(tries) != 2 || tries[0].Title != "Try it" || tries[0].Level != 2 || tries[0].Line != 3 || tries[1].Title != "Try it again" {
		t.Fatalf("sections: %+v", tries)
	}
	// The first holds its subsection, and ends at the next "##"; the
	// comment in its block is no heading.
	if !strings.Contains(tries[0].Body, "### Deeper") || strings.Contains(tries[0].Body, "again") {
		t.Errorf("first section's body:\n%s", tries[0].Body)
	}
	// The last ends at the next "#", a heading of a higher level.
	if tries[1].Body != "```\nplain\n```\n#not a heading\n" {
		t.Errorf("second section's body: %q", tries[1].Body)
	}
	blocks := Blocks(tries[0].Body)
	want := []Block{
		{Lang: "sh", Line: 2, Body: "# a comment, not a heading\necho hi\n"},
		{Lang: "console", Line: 8, Body: "$ trellis version\n"},
	}
	if len(blocks) != len(want) {
		t.Fatalf("blocks: %+v", blocks)
	}
	for i := range want {
		if blocks[i] != want[i] {
			t.Errorf("block %d: %+v, want %+v", i, blocks[i], want[i])
		}
	}
	if b := Blocks(tries[1].Body); len(b) != 1 || b[0].Lang != "" || b[0].Body != "plain\n" {
		t.Errorf("a block without a language: %+v", b)
	}
	if s, ok := Find(doc, "Deeper"); !ok || s.Level != 3 || Blocks(s.Body)[0].Lang != "console" {
		t.Errorf("Find(Deeper) = %+v, %t", s, ok)
	}
	if _, ok := Find(doc, "Missing"); ok {
		t.Error("Find found a section that is not there")
	}
}

// FirstCode: the first block of the language in the section, and an
// error that names what is missing.
func TestFirstCode(t *testing.T) {
	doc := "# A\n```sh\nls\n```\n```go\nfunc a() {}\n```\n# B\ntext\n"
	if got, err := FirstCode(doc, "A", "go"); err != nil || got != "func a() {}\n" {
		t.Errorf("FirstCode(A, go) = %q, %v", got, err)
	}
	for _, c := range []struct{ title, lang, want string }{
		{"B", "go", `section "B" quotes no go code`},
		{"C", "go", `no section "C"`},
	} {
		if _, err := FirstCode(doc, c.title, c.lang); err == nil || err.Error() != c.want {
			t.Errorf("FirstCode(%s, %s) = %v, want %q", c.title, c.lang, err, c.want)
		}
	}
}
