package v1alpha1

import (
	"net/url"
	"regexp"
	"strings"
)

var (
	// meetCode is a Google Meet meeting code (abc-defg-hij), in any case.
	meetCode = regexp.MustCompile(`^/([a-z]{3}-[a-z]{4}-[a-z]{3})$`)
	// zoomPath matches the paths of a Zoom meeting link that carry the meeting's number: /j/N,
	// /w/N, /s/N (join, webinar, start) and the web client's /wc/join/N and /wc/N/join.
	zoomPath = regexp.MustCompile(`^/(?:j|w|s|wc/join|wc)/([0-9]{9,12})(?:/join)?$`)
	// zoomNumber is a Zoom meeting number as the /join?confno= form carries it.
	zoomNumber = regexp.MustCompile(`^[0-9]{9,12}$`)
	// zoomPersonal is a personal meeting link, /my/<name>.
	zoomPersonal = regexp.MustCompile(`^/my/([a-z0-9._-]+)$`)
	// teamsMeeting matches a Teams meeting's path: a meetup-join link's thread and message, or
	// a short /meet/<id> link.
	teamsMeeting = regexp.MustCompile(`^/(?:l/meetup-join/[^/]+/[^/]+|meet/[0-9]+)$`)
)

// MeetingKey is the deduplication key of a meeting URL (a pool's deduplication MeetingURL):
// two links to one meeting have the same key. What a link carries besides the meeting — the
// scheme's and host's case, query strings (Zoom's pwd=, Teams' context=, Meet's authuser=),
// fragments, trailing slashes, Zoom's regional hosts (us02web.zoom.us) — does not count.
//
//   - Google Meet: meet.google.com/ and the meeting code, lower case.
//   - Zoom: zoom.us/j/ and the meeting number, whichever of its join paths the link takes
//     (/j/, /w/, /s/, the web client's, /join?confno=); a personal link (/my/name) by its
//     name, lower case.
//   - Microsoft Teams: the host and the meeting's path, percent-decoded (a meetup-join link's
//     thread id is the same meeting however its colons and @ are escaped, and in whichever
//     case the escapes are written), also when a launcher link (/dl/launcher/launcher.html?url=)
//     or a web-app link (/_#/l/meetup-join/…) wraps it; a short link (/meet/<id>) by its id.
//
// A link of any other shape has no key ("", no deduplication): two links that cannot be told
// to name one meeting must not end a bot as the other's duplicate. "" for a URL that does not
// parse.
func MeetingKey(meetingURL string) string {
	u, err := url.Parse(strings.TrimSpace(meetingURL))
	if err != nil || u.Host == "" {
		return ""
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	path := strings.TrimRight(u.Path, "/") // u.Path is decoded: %3a and %3A read alike
	switch {
	case host == "meet.google.com":
		if m := meetCode.FindStringSubmatch(strings.ToLower(path)); m != nil {
			return host + "/" + m[1]
		}
	case host == "zoom.us" || strings.HasSuffix(host, ".zoom.us"):
		if m := zoomPath.FindStringSubmatch(path); m != nil {
			return "zoom.us/j/" + m[1]
		}
		if n := u.Query().Get("confno"); path == "/join" && zoomNumber.MatchString(n) {
			return "zoom.us/j/" + n
		}
		if m := zoomPersonal.FindStringSubmatch(strings.ToLower(path)); m != nil {
			return "zoom.us/my/" + m[1]
		}
	case host == "teams.microsoft.com" || host == "teams.live.com":
		if path == "/dl/launcher/launcher.html" {
			// The launcher carries the meeting's web-app path in its url parameter.
			inner, err := url.Parse(u.Query().Get("url"))
			if err != nil {
				return ""
			}
			u, path = inner, strings.TrimRight(inner.Path, "/")
		}
		if path == "/_" || path == "" {
			// The web app's route is in the fragment: /_#/l/meetup-join/…
			path = strings.TrimRight(strings.SplitN(u.Fragment, "?", 2)[0], "/")
		}
		if teamsMeeting.MatchString(path) {
			return host + path
		}
	}
	return ""
}
