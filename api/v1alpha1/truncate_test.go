package v1alpha1

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in    string
		limit int
		want  string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"0123456789abc", 10, "0123456…"},
		{"ééééé", 6, "é…"}, // never half a character
		{"abc", 2, ""},
	} {
		if got := Truncate(tc.in, tc.limit); got != tc.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
		}
	}
	long := strings.Repeat("ü", MaxMessageLength)
	got := Truncate(long, MaxMessageLength)
	if len(got) > MaxMessageLength || !utf8.ValidString(got) {
		t.Errorf("cut to %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
	}
}
