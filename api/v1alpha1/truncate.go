package v1alpha1

import "unicode/utf8"

// Length limits of the free-text status fields, as the CRDs declare them. A write over a
// limit is refused by the API server, and refused again on every retry: every writer cuts its
// text with Truncate first.
const (
	// MaxMessageLength is the limit of status.message on Bots and BotPoolSlots.
	MaxMessageLength = 1024
	// MaxReasonLength is the limit of status.reason on Bots and BotPoolSlots.
	MaxReasonLength = 128
	// MaxConditionMessageLength is metav1.Condition's limit on message.
	MaxConditionMessageLength = 32768
)

// Truncate cuts s to at most limit bytes without splitting a UTF-8 character, ending a cut
// text with "…" so a reader sees it was cut.
func Truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	const ellipsis = "…"
	if limit < len(ellipsis) {
		return ""
	}
	cut := limit - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
