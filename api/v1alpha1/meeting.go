package v1alpha1

import (
	"net/url"
	"regexp"
	"strings"
)

// zoomPath matches the paths of a Zoom meeting link that carry the meeting's number: /j/N,
// /w/N, /s/N (join, webinar, start) and the web client's /wc/join/N and /wc/N/join.
var zoomPath = regexp.MustCompile(`^/(?:j|w|s|wc/join|wc)/([0-9]{9,12})(?:/join)?/?$`)

// MeetingKey is the deduplication key of a meeting URL (a pool's deduplication MeetingURL):
// two links to one meeting have the same key. What a link carries besides the meeting — the
// scheme's and host's case, query strings (Zoom's pwd=, Teams' context=, Meet's authuser=),
// fragments, trailing slashes, Zoom's regional hosts (us02web.zoom.us) — does not count.
//
//   - Google Meet: meet.google.com/ and the meeting code, lower case.
//   - Zoom: zoom.us/j/ and the meeting number, whichever of its join paths the link takes; a
//     personal link (/my/name) by its name, lower case.
//   - Microsoft Teams: the host and the path, percent-decoded (a meetup-join link's thread id
//     is the same meeting however its colons and @ are escaped, and in whichever case the
//     escapes are written).
//
// "" for a URL that does not parse.
func MeetingKey(meetingURL string) string {
	u, err := url.Parse(strings.TrimSpace(meetingURL))
	if err != nil || u.Host == "" {
		return ""
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	path := strings.TrimRight(u.Path, "/") // u.Path is decoded: %3a and %3A read alike
	switch {
	case host == "meet.google.com":
		return host + strings.ToLower(path)
	case host == "zoom.us" || strings.HasSuffix(host, ".zoom.us"):
		if m := zoomPath.FindStringSubmatch(path); m != nil {
			return "zoom.us/j/" + m[1]
		}
		return "zoom.us" + strings.ToLower(path)
	}
	return host + path
}
