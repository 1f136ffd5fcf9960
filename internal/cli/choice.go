package cli

import (
	"fmt"
	"slices"
	"strings"
)

// Choice is the value of a flag that takes one of a closed set of values:
// an output format, a task status, a log level. It refuses anything else
// while the flags are parsed, before the command sends a request, because
// a filter with a mistyped value would otherwise match nothing and look
// like an empty answer. Values match whatever their case and are stored as
// listed, so "running" filters as RUNNING.
type Choice struct {
	target *string
	what   string
	values []string
}

// NewChoice sets *target to def and returns the flag value that stores one
// of values there. what names a value for errors ("a task status").
func NewChoice(target *string, def, what string, values ...string) *Choice {
	*target = def
	return &Choice{target: target, what: what, values: values}
}

// Set stores s as the listed value it matches, or fails with a
// *ChoiceError.
func (c *Choice) Set(s string) error {
	for _, v := range c.values {
		if strings.EqualFold(s, v) {
			*c.target = v
			return nil
		}
	}
	return &ChoiceError{Value: s, What: c.what, Values: slices.Clone(c.values)}
}

// String is the current value. pflag calls it on a zero Choice to learn
// whether a default is worth showing.
func (c *Choice) String() string {
	if c.target == nil {
		return ""
	}
	return *c.target
}

// Type is what --help shows as the flag's argument.
func (c *Choice) Type() string { return "string" }

// Values are the accepted values, for shell completion.
func (c *Choice) Values() []string { return slices.Clone(c.values) }

// ChoiceError is a value outside a flag's closed set.
type ChoiceError struct {
	Value  string
	What   string
	Values []string
}

func (e *ChoiceError) Error() string {
	return fmt.Sprintf("%q is not %s: use %s", e.Value, e.What, orList(e.Values))
}

// orList joins values as "a, b or c".
func orList(values []string) string {
	switch len(values) {
	case 0:
		return "nothing"
	case 1:
		return values[0]
	}
	return strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
}
