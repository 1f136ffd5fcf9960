package proxy

import "strings"

// NormalizePath is the path the L7 permissions decide on and the app
// then receives, so that the two cannot read one request differently: a
// path written with dot segments or repeated slashes ("/v1/../admin",
// "//admin") is the one it names ("/admin"), as Envoy's path
// normalization and slash merging make it. It takes the decoded path
// (url.URL.Path: "%2F" already "/"), keeps a trailing slash, and leaves
// a path that does not start with "/" (an OPTIONS "*") alone.
func NormalizePath(p string) string {
	if !strings.HasPrefix(p, "/") {
		return p
	}
	trailing := strings.HasSuffix(p, "/") || strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/..")
	var out []string
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case "", ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, seg)
		}
	}
	s := "/" + strings.Join(out, "/")
	if trailing && s != "/" {
		s += "/"
	}
	return s
}
