package callback

import (
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := epoch
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"30", 30 * time.Second},
		{" 5 ", 5 * time.Second},
		{"0", 0},
		{"-3", 0},
		{"soon", 0},
		{"99999999999", 24 * time.Hour},
		{now.Add(90 * time.Second).Format(httpDate), 90 * time.Second},
		{now.Add(-time.Minute).Format(httpDate), 0},
	} {
		if got := parseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

const httpDate = "Mon, 02 Jan 2006 15:04:05 GMT"

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://hooks.example.com/bots?token=s3cret":     "https://hooks.example.com/bots",
		"https://user:pw@hooks.example.com:8443/a/b#frag": "https://hooks.example.com:8443/a/b",
		"http://10.0.0.1/cb":                              "http://10.0.0.1/cb",
		"http://%zz":                                      "<invalid URL>",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBackoff(t *testing.T) {
	n := New(Options{BackoffBase: time.Second, BackoffCap: time.Minute, Jitter: func(d time.Duration) time.Duration { return d }})
	for _, tc := range []struct {
		attempt    int
		retryAfter time.Duration
		want       time.Duration
	}{
		{1, 0, time.Second},
		{2, 0, 2 * time.Second},
		{6, 0, 32 * time.Second},
		{7, 0, time.Minute},                     // 64s capped
		{100, 0, time.Minute},                   // no overflow
		{1, 30 * time.Second, 30 * time.Second}, // the receiver knows better
		{1, time.Hour, time.Minute},             // but not beyond the cap
	} {
		if got := n.backoff(tc.attempt, tc.retryAfter); got != tc.want {
			t.Errorf("backoff(%d, %v) = %v, want %v", tc.attempt, tc.retryAfter, got, tc.want)
		}
	}
}

func TestFullJitterStaysInRange(t *testing.T) {
	for range 1000 {
		if d := fullJitter(time.Second); d < 0 || d > time.Second {
			t.Fatalf("fullJitter(1s) = %v", d)
		}
	}
	if d := fullJitter(0); d != 0 {
		t.Errorf("fullJitter(0) = %v", d)
	}
}
