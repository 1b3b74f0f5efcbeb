package v1alpha1

// WebhookEvents says which phase changes of a Bot are POSTed to its webhook.
// +kubebuilder:validation:Enum=Final;EveryPhase
type WebhookEvents string

const (
	// WebhookFinal posts once, when the bot ends in Done or Fatal (what callbackURL does).
	WebhookFinal WebhookEvents = "Final"
	// WebhookEveryPhase posts every phase the bot controller records, in order.
	WebhookEveryPhase WebhookEvents = "EveryPhase"
)

// Webhook asks for a signed POST of a Bot's phase changes. See docs/callbacks.md.
type Webhook struct {
	// URL receives the POSTs.
	// +required
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https']",message="url must be an http:// or https:// URL"
	URL string `json:"url"`

	// Events is Final (the end only, the default) or EveryPhase.
	// +optional
	// +kubebuilder:default=Final
	Events WebhookEvents `json:"events,omitempty"`

	// SecretRef names the key of a Secret in the bot's namespace that holds the signing secret
	// (Standard Webhooks: "whsec_" followed by base64, or raw bytes). The Secret must carry the
	// label botpool.dev/allow-pool-use=true. Without it the POSTs are not signed.
	// +optional
	SecretRef *WebhookSecretRef `json:"secretRef,omitempty"`
}

// WebhookSecretRef names one key of a Secret in the bot's namespace.
type WebhookSecretRef struct {
	// Name of the Secret: a DNS subdomain, as Secret names are.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// Key in the Secret's data: letters, digits, '-', '_' and '.', as Secret keys are.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// WebhookStatus is what became of a Bot's webhook messages, written by the bot controller only
// from the outbox it fills (see docs/callbacks.md).
type WebhookStatus struct {
	// Sequence counts the messages handed to the outbox; the next one is numbered Sequence+1.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Sequence int64 `json:"sequence,omitempty"`

	// Phase is the bot phase of the last message handed to the outbox.
	// +optional
	Phase BotPhase `json:"phase,omitempty"`

	// DeliveredPhase is the phase of the last message the receiver accepted (2xx).
	// +optional
	DeliveredPhase BotPhase `json:"deliveredPhase,omitempty"`

	// CountedSequence is the highest sequence number whose outcome Delivered and Failures
	// count: a bot's messages finish in order, so each is counted once, even after the outbox
	// forgot it (retention, a restart of the in-memory outbox).
	// +optional
	// +kubebuilder:validation:Minimum=0
	CountedSequence int64 `json:"countedSequence,omitempty"`

	// Delivered counts the messages the receiver accepted.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Delivered int32 `json:"delivered,omitempty"`

	// Pending counts the messages still being tried.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Pending int32 `json:"pending,omitempty"`

	// Failures counts the messages given up (rejected, or still failing after the retry
	// window); each one also has a WebhookFailed Warning Event.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Failures int32 `json:"failures,omitempty"`

	// LastError is the last failed attempt's error, or why no message can be made (the
	// signing Secret), truncated.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	LastError string `json:"lastError,omitempty"`
}

// EffectiveWebhook is the webhook a bot's messages go to: its own spec.webhook, else its
// pool's spec.webhookDefaults (pool may be nil); nil when neither sets one. spec.callbackURL is
// separate: the unsigned Final shorthand, delivered from memory as before.
func EffectiveWebhook(bot *Bot, pool *BotPool) *Webhook {
	if bot.Spec.Webhook != nil {
		return bot.Spec.Webhook
	}
	if pool != nil && pool.Spec.WebhookDefaults != nil {
		return pool.Spec.WebhookDefaults
	}
	return nil
}

// Wants reports whether a webhook posts a bot's phase p.
func (w *Webhook) Wants(p BotPhase) bool {
	if p == "" {
		return false
	}
	if w.Events == WebhookEveryPhase {
		return true
	}
	return p.Terminal()
}
