package v1alpha1

import (
	"net/url"
	"strings"
)

// Platform is a meeting platform a pool serves.
// +kubebuilder:validation:Enum=google-meet;microsoft-teams;zoom
type Platform string

const (
	PlatformGoogleMeet     Platform = "google-meet"
	PlatformMicrosoftTeams Platform = "microsoft-teams"
	PlatformZoom           Platform = "zoom"
)

// PlatformForURL returns the platform a meeting URL belongs to, or false when the URL is not
// an https link to a supported platform. It mirrors the CEL rules on BotSpec.MeetingURL, so a
// controller derives the same platform the API server validated.
func PlatformForURL(meetingURL string) (Platform, bool) {
	u, err := url.Parse(meetingURL)
	if err != nil || u.Scheme != "https" {
		return "", false
	}
	switch host := strings.ToLower(u.Hostname()); {
	case host == "meet.google.com":
		return PlatformGoogleMeet, true
	case host == "teams.microsoft.com", host == "teams.live.com":
		return PlatformMicrosoftTeams, true
	case host == "zoom.us", strings.HasSuffix(host, ".zoom.us"):
		return PlatformZoom, true
	}
	return "", false
}
