package v1alpha1

import (
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Length limits of the free-text status fields, as the CRDs declare them. A write over a
// limit is refused by the API server, and refused again on every retry: every writer cuts its
// text with Truncate first.
const (
	// MaxMessageLength is the limit of status.message on Bots and BotPoolSlots, and of
	// status.servers[].pull.message on BotPools.
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

// TruncateConditions cuts condition messages to metav1.Condition's limit.
func TruncateConditions(conds []metav1.Condition) {
	for i := range conds {
		conds[i].Message = Truncate(conds[i].Message, MaxConditionMessageLength)
	}
}

// TruncateTexts cuts the slot status's free texts to the CRD's limits: every writer calls it
// before its status write.
func (st *BotPoolSlotStatus) TruncateTexts() {
	st.Message = Truncate(st.Message, MaxMessageLength)
	st.Reason = Truncate(st.Reason, MaxReasonLength)
	TruncateConditions(st.Conditions)
}

// TruncateTexts cuts the bot status's free texts to the CRD's limits: every writer calls it
// before its status write.
func (st *BotStatus) TruncateTexts() {
	st.Message = Truncate(st.Message, MaxMessageLength)
	st.Reason = BotReason(Truncate(string(st.Reason), MaxReasonLength))
	TruncateConditions(st.Conditions)
}

// TruncateTexts cuts the pool status's free texts (condition messages, the pre-pulls' failure
// messages, which quote Coolify's log) to the CRD's limits: every writer calls it before its
// status write.
func (st *BotPoolStatus) TruncateTexts() {
	for i := range st.Servers {
		if p := st.Servers[i].Pull; p != nil {
			p.Message = Truncate(p.Message, MaxMessageLength)
		}
	}
	TruncateConditions(st.Conditions)
}
