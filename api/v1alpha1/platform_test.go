package v1alpha1

import (
	"testing"
	"time"
)

func TestPlatformForURL(t *testing.T) {
	tests := []struct {
		url    string
		want   Platform
		wantOK bool
	}{
		{"https://meet.google.com/abc-defg-hij", PlatformGoogleMeet, true},
		{"https://MEET.google.com/abc", PlatformGoogleMeet, true},
		{"https://teams.microsoft.com/l/meetup-join/x", PlatformMicrosoftTeams, true},
		{"https://teams.live.com/meet/1", PlatformMicrosoftTeams, true},
		{"https://zoom.us/j/1", PlatformZoom, true},
		{"https://us02web.zoom.us/j/1?pwd=x", PlatformZoom, true},
		{"https://zoom.us:443/j/1", PlatformZoom, true},
		{"http://meet.google.com/abc", "", false},
		{"https://notzoom.us/j/1", "", false},
		{"https://zoom.us.evil.example/j/1", "", false},
		{"https://meet.google.com@evil.example/x", "", false},
		{"meet.google.com/abc", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, ok := PlatformForURL(tt.url)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("PlatformForURL(%q) = %q, %v; want %q, %v", tt.url, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestDuration(t *testing.T) {
	tests := []struct {
		d         Duration
		want      time.Duration
		orDefault time.Duration
	}{
		{"15s", 15 * time.Second, 15 * time.Second},
		{"1h30m", 90 * time.Minute, 90 * time.Minute},
		{"1.5h", 90 * time.Minute, 90 * time.Minute},
		{"", 0, time.Minute},
		{"-5m", 0, time.Minute},
		{"five minutes", 0, time.Minute},
	}
	for _, tt := range tests {
		if got := tt.d.Duration(); got != tt.want {
			t.Errorf("Duration(%q) = %v, want %v", tt.d, got, tt.want)
		}
		if got := tt.d.OrDefault(time.Minute); got != tt.orDefault {
			t.Errorf("Duration(%q).OrDefault(1m) = %v, want %v", tt.d, got, tt.orDefault)
		}
	}
}
