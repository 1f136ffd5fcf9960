package command

import "strings"

// ShortKeyID is how people are shown a root's key id: a SHA-256 written
// as 32 colon-separated bytes is 95 characters, wider than a terminal's
// table, so tables and messages show its first four and last three bytes
// ("aa:cc:6c:6c:…:77:d9:ed"), enough to tell the roots of a cluster apart
// and to find one in the full id that -o json prints. An id of seven
// bytes or fewer, or not of that form, is shown whole.
func ShortKeyID(id string) string {
	parts := strings.Split(id, ":")
	if len(parts) <= 7 {
		return id
	}
	return strings.Join(parts[:4], ":") + ":…:" + strings.Join(parts[len(parts)-3:], ":")
}
