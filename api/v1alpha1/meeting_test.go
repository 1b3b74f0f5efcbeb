package v1alpha1

import "testing"

func TestMeetingKeyTellsMeetingsApart(t *testing.T) {
	same := [][]string{
		{ // Google Meet: case, authuser, trailing slash, fragment
			"https://meet.google.com/abc-defg-hij",
			"https://MEET.google.com/ABC-defg-hij/",
			"https://meet.google.com/abc-defg-hij?authuser=1&hs=122",
			"HTTPS://meet.google.com/abc-defg-hij#x",
		},
		{ // Zoom: regional host, pwd, the web client's paths, a trailing slash
			"https://zoom.us/j/85812345678",
			"https://us02web.zoom.us/j/85812345678?pwd=aBcD1234efGH.1",
			"https://US05WEB.ZOOM.US/j/85812345678/?pwd=other",
			"https://app.zoom.us/wc/join/85812345678",
			"https://zoom.us/wc/85812345678/join?pwd=x",
			"https://zoom.us/w/85812345678?tk=abc",
		},
		{ // Teams meetup-join: escapes in either case, context query
			"https://teams.microsoft.com/l/meetup-join/19%3ameeting_NjQ1ZDFj%40thread.v2/0?context=%7b%22Tid%22%3a%22x%22%7d",
			"https://teams.microsoft.com/l/meetup-join/19%3Ameeting_NjQ1ZDFj%40thread.v2/0",
			"https://Teams.Microsoft.com/l/meetup-join/19:meeting_NjQ1ZDFj@thread.v2/0/",
		},
		{ // Teams' launcher and web-app links wrap the meetup-join path
			"https://teams.microsoft.com/l/meetup-join/19%3ameeting_ZmQ5%40thread.v2/0",
			"https://teams.microsoft.com/dl/launcher/launcher.html?url=%2F_%23%2Fl%2Fmeetup-join%2F19%3Ameeting_ZmQ5%40thread.v2%2F0%3Fcontext%3Dx&type=meetup-join&directDl=true",
			"https://teams.microsoft.com/_#/l/meetup-join/19:meeting_ZmQ5@thread.v2/0?context=y",
		},
		{ // Zoom's /join form
			"https://zoom.us/j/93012345678",
			"https://zoom.us/join?confno=93012345678&pwd=x",
		},
		{ // Teams' short links: the passcode is not the meeting
			"https://teams.microsoft.com/meet/2345678901234?p=AbCdEfGh",
			"https://teams.microsoft.com/meet/2345678901234",
		},
		{ // a Zoom personal link
			"https://zoom.us/my/Jane.Doe",
			"https://zoom.us/my/jane.doe?pwd=1",
		},
	}
	seen := map[string]int{}
	for i, group := range same {
		key := MeetingKey(group[0])
		if key == "" {
			t.Fatalf("MeetingKey(%q) is empty", group[0])
		}
		for _, u := range group[1:] {
			if got := MeetingKey(u); got != key {
				t.Errorf("MeetingKey(%q) = %q, want %q (the key of %q)", u, got, key, group[0])
			}
		}
		if j, dup := seen[key]; dup {
			t.Errorf("meetings %d and %d share the key %q", j, i, key)
		}
		seen[key] = i
	}
	different := [][2]string{
		{"https://meet.google.com/abc-defg-hij", "https://meet.google.com/abc-defg-hik"},
		{"https://zoom.us/j/85812345678", "https://zoom.us/j/85812345679"},
		{"https://teams.microsoft.com/l/meetup-join/19%3ameeting_NjQ1ZDFj%40thread.v2/0",
			"https://teams.microsoft.com/l/meetup-join/19%3ameeting_njq1zdfj%40thread.v2/0"}, // Teams' ids keep their case
		{"https://teams.microsoft.com/meet/2345678901234", "https://teams.live.com/meet/2345678901234"},
	}
	for _, d := range different {
		if a, b := MeetingKey(d[0]), MeetingKey(d[1]); a == b {
			t.Errorf("%q and %q share the key %q", d[0], d[1], a)
		}
	}
	// Links whose meeting cannot be told have no key: never a duplicate of one another.
	for _, u := range []string{
		"://nope",
		"https://zoom.us/join",
		"https://zoom.us/join?confno=abc",
		"https://teams.microsoft.com/dl/launcher/launcher.html",
		"https://teams.microsoft.com/_",
		"https://teams.microsoft.com/l/channel/19%3aabc%40thread.skype/General",
		"https://meet.google.com/",
		"https://meet.google.com/landing",
		"https://zoom.us.evil.com/j/85812345678",
	} {
		if k := MeetingKey(u); k != "" {
			t.Errorf("MeetingKey(%q) = %q, want none", u, k)
		}
	}
}
