package cli

import (
	"errors"
	"fmt"
	"strings"
)

// ArgNames reads the names of a command's positional arguments from its
// usage line, so that an error can name the argument it is about:
// "get TYPE NAME" gives TYPE and NAME, "logs TASK [CONTAINER]" gives TASK
// and CONTAINER, "set-attribute NAME KEY=VALUE..." gives NAME and
// KEY=VALUE (the last name stands for every argument after it). Reading
// stops at the first flag ("-f FILE", "[--version V]") or alternative
// ("(-f FILE | flags)"), which are not positional.
func ArgNames(use string) []string {
	fields := strings.Fields(use)
	if len(fields) < 2 {
		return nil
	}
	var names []string
	for _, f := range fields[1:] {
		if strings.HasPrefix(f, "[") {
			f = strings.TrimSuffix(f[1:], "]")
		}
		if f == "" || strings.HasPrefix(f, "-") || strings.HasPrefix(f, "(") || strings.HasPrefix(f, "|") {
			break
		}
		names = append(names, strings.TrimSuffix(f, "..."))
	}
	return names
}

// ArgName is the name of the i-th (from 0) positional argument.
func ArgName(names []string, i int) string {
	if len(names) == 0 {
		return fmt.Sprintf("argument %d", i+1)
	}
	return names[min(i, len(names)-1)]
}

// CheckArgsNotBlank refuses an empty or all-blank positional argument,
// naming it. No command takes one on purpose, and an empty name sent to
// the API would address the collection rather than a resource in it.
func CheckArgsNotBlank(names, args []string) error {
	for i, a := range args {
		switch {
		case a == "":
			return fmt.Errorf("%s: must not be empty", ArgName(names, i))
		case strings.TrimSpace(a) == "":
			return fmt.Errorf("%s: %q is blank", ArgName(names, i), a)
		}
	}
	return nil
}

// UnknownCommand is the error for a word that is not one of the
// subcommands of the command at path, in cobra's words and with the
// subcommands it resembles.
func UnknownCommand(path, word string, suggestions []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "unknown command %q for %q", word, path)
	if len(suggestions) > 0 {
		b.WriteString("\n\nDid you mean this?")
		for _, s := range suggestions {
			b.WriteString("\n\t" + s)
		}
	}
	return errors.New(b.String())
}
