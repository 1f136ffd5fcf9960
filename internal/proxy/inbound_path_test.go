package proxy

import "testing"

func TestNormalizePath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/", "/"},
		{"/admin", "/admin"},
		{"/admin/", "/admin/"},
		{"//admin", "/admin"},
		{"/v1//items///3", "/v1/items/3"},
		{"/v1/../admin/users", "/admin/users"},
		{"/./admin", "/admin"},
		{"/../../admin", "/admin"},
		{"/v1/items/..", "/v1/"},
		{"/v1/items/.", "/v1/items/"},
		{"/a/b/../../..", "/"},
		{"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Check"},
		{"/..admin/x", "/..admin/x"},
		{"*", "*"},
		{"", ""},
	} {
		if got := NormalizePath(tc.in); got != tc.want {
			t.Errorf("NormalizePath(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
