// Package markdown reads what the tests hold the docs to: the sections of
// a document by their headings, and the fenced code blocks in them (a Go
// example quoted from the code, a shell session that must run). It reads
// the little of Markdown that docs/ uses, ATX headings ("## Title") and
// fenced blocks ("```sh"), and no more.
//
// Design decisions:
//
//   - One reader for every such test: a heading is only a heading
//     outside a fenced block, where a shell comment ("# then this") looks
//     like one, and every test that cuts a doc by hand gets that wrong in
//     its own way.
//   - Pure functions of the document's text; the tests read the files.
package markdown

import (
	"fmt"
	"strings"
)

// Section is a heading of a document and what it holds, up to the next
// heading of the same or a higher level.
type Section struct {
	Level int    // 1 for "#", 2 for "##", ...
	Title string // the heading's text, trimmed
	Line  int    // the heading's line, from 1
	Body  string // the lines under the heading, subsections included
}

// Sections are the document's sections whose title match accepts, in
// the order they appear.
func Sections(doc string, match func(title string) bool) []Section {
	lines := strings.SplitAfter(doc, "\n")
	type heading struct{ level, line int }
	var hs []heading
	inFence := false
	for i, l := range lines {
		if isFence(l) {
			inFence = !inFence
			continue
		}
		if level := headingLevel(l); level > 0 && !inFence {
			hs = append(hs, heading{level, i})
		}
	}
	var out []Section
	for k, h := range hs {
		title := strings.TrimSpace(strings.TrimLeft(lines[h.line], "#"))
		if !match(title) {
			continue
		}
		end := len(lines)
		for _, next := range hs[k+1:] {
			if next.level <= h.level {
				end = next.line
				break
			}
		}
		out = append(out, Section{Level: h.level, Title: title, Line: h.line + 1, Body: strings.Join(lines[h.line+1:end], "")})
	}
	return out
}

// Find is the first section titled title; ok is false when there is none.
func Find(doc, title string) (Section, bool) {
	s := Sections(doc, func(t string) bool { return t == title })
	if len(s) == 0 {
		return Section{}, false
	}
	return s[0], true
}

// Block is a fenced code block.
type Block struct {
	Lang string // the fence's info string: "sh", "go", "" when none
	Line int    // the opening fence's line in the text, from 1
	Body string // the lines between the fences, each ending in "\n"
}

// Blocks are the fenced code blocks of text, in order. A block whose
// fence is never closed runs to the end of the text.
func Blocks(text string) []Block {
	var out []Block
	var cur *Block
	indent := ""
	for i, l := range strings.SplitAfter(text, "\n") {
		if isFence(l) {
			if cur == nil {
				trimmed := strings.TrimLeft(l, " ")
				indent = l[:len(l)-len(trimmed)]
				cur = &Block{Lang: strings.TrimSpace(strings.TrimLeft(trimmed, "`")), Line: i + 1}
			} else {
				out = append(out, *cur)
				cur = nil
			}
			continue
		}
		if cur != nil {
			// A block indented under a list item holds its lines
			// without that indent.
			cur.Body += strings.TrimPrefix(l, indent)
		}
	}
	if cur != nil {
		out = append(out, *cur)
	}
	return out
}

func isFence(line string) bool { return strings.HasPrefix(strings.TrimLeft(line, " "), "```") }

// headingLevel is the level of an ATX heading line, 0 for any other line.
func headingLevel(line string) int {
	n := len(line) - len(strings.TrimLeft(line, "#"))
	if n == 0 || n > 6 || len(line) == n || (line[n] != ' ' && line[n] != '\t') {
		return 0
	}
	return n
}

// FirstCode is the first code block in lang of the section titled title
// of doc: what a doc quotes of code that a test keeps compiling. The error
// says which is missing.
func FirstCode(doc, title, lang string) (string, error) {
	sec, ok := Find(doc, title)
	if !ok {
		return "", fmt.Errorf("no section %q", title)
	}
	for _, b := range Blocks(sec.Body) {
		if b.Lang == lang {
			return b.Body, nil
		}
	}
	return "", fmt.Errorf("section %q quotes no %s code", title, lang)
}
