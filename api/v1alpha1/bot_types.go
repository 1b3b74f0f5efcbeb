package v1alpha1

import (
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Defaults of Bot.spec, the same values the CRD defaults to.
const (
	DefaultMaxDuration = time.Hour
	// MaxQueueTimeout is the largest queueTimeout any bot may ask for; a pool may cap it lower.
	MaxQueueTimeout = 10 * time.Minute
	// DefaultMaxStartAttempts is how many starts a bot gets in all when neither it nor its
	// pool says (see BotPoolSpec.MaxStartAttempts).
	DefaultMaxStartAttempts = 3
	// MaxStartAttempts is the most starts any bot may get, and the most entries of
	// status.startAttempts.
	MaxStartAttempts = 10
)

// BotPhase is where a bot is in its lifecycle:
// Pending → (Scheduled) → Queued → Deploying → JoiningCall → InWaitingRoom → InCall → Leaving
// → CallEnded → Done, and any non-terminal phase → Fatal. JoiningCall … Done are reported by
// the bot itself through the bot API.
// +kubebuilder:validation:Enum=Pending;Scheduled;Queued;Deploying;JoiningCall;InWaitingRoom;InCall;Leaving;CallEnded;Done;Fatal
type BotPhase string

const (
	BotPending       BotPhase = "Pending"
	BotScheduled     BotPhase = "Scheduled"
	BotQueued        BotPhase = "Queued"
	BotDeploying     BotPhase = "Deploying"
	BotJoiningCall   BotPhase = "JoiningCall"
	BotInWaitingRoom BotPhase = "InWaitingRoom"
	BotInCall        BotPhase = "InCall"
	BotLeaving       BotPhase = "Leaving"
	BotCallEnded     BotPhase = "CallEnded"
	BotDone          BotPhase = "Done"
	BotFatal         BotPhase = "Fatal"
)

// Terminal reports whether no transition leads out of p.
func (p BotPhase) Terminal() bool { return p == BotDone || p == BotFatal }

// BotSpec is one meeting to join.
//
// +kubebuilder:validation:XValidation:rule="has(self.deduplicationKey) == has(oldSelf.deduplicationKey)",message="deduplicationKey is immutable: it can be neither added nor removed"
// +kubebuilder:validation:XValidation:rule="!has(self.platform) || ((self.platform == 'google-meet') == self.meetingUrl.matches('^(?i)https://meet[.]google[.]com([:/?#]|$)') && (self.platform == 'microsoft-teams') == self.meetingUrl.matches('^(?i)https://teams[.](microsoft|live)[.]com([:/?#]|$)') && (self.platform == 'zoom') == self.meetingUrl.matches('^(?i)https://([a-z0-9-]+[.])*zoom[.]us([:/?#]|$)'))",message="platform does not match the meetingUrl: meet.google.com is google-meet, teams.microsoft.com and teams.live.com are microsoft-teams, zoom.us is zoom"
type BotSpec struct {
	// MeetingURL is the https link of the meeting: Google Meet (meet.google.com), Microsoft
	// Teams (teams.microsoft.com, teams.live.com) or Zoom (zoom.us, *.zoom.us). Immutable.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() == 'https'",message="meetingUrl must be an https:// URL"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(?i)https://') || self.matches('^(?i)https://(meet[.]google[.]com|teams[.]microsoft[.]com|teams[.]live[.]com|([a-z0-9-]+[.])*zoom[.]us)([:/?#]|$)')",message="meetingUrl must link to Google Meet (meet.google.com), Microsoft Teams (teams.microsoft.com, teams.live.com) or Zoom (zoom.us, *.zoom.us)"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="meetingUrl is immutable; create a new Bot for another meeting"
	MeetingURL string `json:"meetingUrl"`

	// Platform is derived from meetingUrl when omitted; when given it must agree with it.
	// +optional
	Platform Platform `json:"platform,omitempty"`

	// DisplayName is the name the bot shows in the meeting; the bot image's default when empty.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=100
	DisplayName string `json:"displayName,omitempty"`

	// Priority orders the queue: higher first, then first come first served.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=-1000
	// +kubebuilder:validation:Maximum=1000
	Priority int32 `json:"priority"`

	// QueueTimeout is how long the bot waits for a slot before it fails with QueueTimeout.
	// Defaults to the pool's queue.defaultTimeout and is capped by its queue.maxTimeout.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('10m')",message="queueTimeout must be at most 10m"
	QueueTimeout Duration `json:"queueTimeout,omitempty"`

	// StartTime schedules the bot: it waits in Scheduled and joins the queue shortly before
	// this time, so its slot is warm when the meeting starts.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// MaxDuration bounds the bot's time in the meeting; past it the bot is asked to leave.
	// +optional
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('24h')",message="maxDuration must be at most 24h"
	MaxDuration Duration `json:"maxDuration,omitempty"`

	// Recording says whether the bot records the meeting.
	// +optional
	// +kubebuilder:default={}
	Recording Recording `json:"recording,omitempty"`

	// AutomaticLeave says when the bot leaves a meeting on its own.
	// +optional
	// +kubebuilder:default={}
	AutomaticLeave AutomaticLeave `json:"automaticLeave,omitempty"`

	// CallbackURL receives a POST of {bot, phase, reason} when the bot ends in Done or Fatal.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https']",message="callbackURL must be an http:// or https:// URL"
	CallbackURL string `json:"callbackURL,omitempty"`

	// Webhook asks for signed POSTs of the bot's phase changes (every phase, or the end only),
	// delivered through the store's outbox with retries for up to a day. It replaces the pool's
	// webhookDefaults. See docs/callbacks.md.
	// +optional
	Webhook *Webhook `json:"webhook,omitempty"`

	// PoolRef picks a pool by name, in the bot's namespace or (with namespace) in another one
	// that admits it (the pool's spec.allowedNamespaces). Without it the bot goes to a pool of
	// its platform in its own namespace, else to a pool of another namespace shared with it;
	// see docs/tenancy.md.
	// +optional
	PoolRef *PoolReference `json:"poolRef,omitempty"`

	// TTLAfterFinished deletes the Bot this long after it ended in Done or Fatal; finished bots
	// are kept when it is unset.
	// +optional
	TTLAfterFinished Duration `json:"ttlAfterFinished,omitempty"`

	// Parameters is a JSON object handed to the bot's container in its configuration, exactly
	// as written, over its pool's parameterDefaults (top-level keys; the bot's win): the
	// transcription provider, the language, the avatar, whatever the bot image reads. At most
	// 64 top-level keys (the API server) and 32 KiB once merged with the defaults (the bot
	// waits with ParametersReady False, ParametersTooLarge, until it is smaller). It reaches
	// the container when its binding is handed out: a change after that does not. Not for
	// secrets: see secretParameters.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:MaxProperties=64
	Parameters *apiextensionsv1.JSON `json:"parameters,omitempty"`

	// SecretParameters are values read from Secrets of the bot's namespace when its binding is
	// handed out, and given to the container that takes the binding alone: never to a slot's
	// env, a status, an Event, a log line or a webhook. Each Secret must carry the label
	// botpool.dev/allow-bot-parameters=true. Until every one can be read the bot waits in its
	// queue (ParametersReady False) and is not bound.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	SecretParameters []SecretParameter `json:"secretParameters,omitempty"`

	// DeduplicationKey names the meeting (or anything else one bot at a time should do): a
	// second Bot with the same key in the same pool, while one that holds it has not ended,
	// ends Fatal with reason Duplicate. Pools with spec.deduplication MeetingURL give bots
	// without one the key of their normalized meeting URL. Immutable.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="deduplicationKey is immutable"
	DeduplicationKey string `json:"deduplicationKey,omitempty"`

	// MaxStartAttempts is how many starts the bot gets in all, overriding its pool's
	// maxStartAttempts: a start that fails for a reason of the infrastructure (the
	// deployment failed or was lost, the application or the standby container went away)
	// before the bot ran puts it back at the head of the queue, until this many failed.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 10",message="maxStartAttempts must be between 1 and 10"
	MaxStartAttempts int32 `json:"maxStartAttempts,omitempty"`
}

// SecretParameter is one value of spec.secretParameters: the key of a Secret in the bot's
// namespace.
type SecretParameter struct {
	// Name is the value's name in the configuration's secretParameters object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_.-]*$`
	Name string `json:"name"`
	// SecretKeyRef is the Secret (labelled botpool.dev/allow-bot-parameters=true) and its key.
	// The value is at most 8 KiB of UTF-8 text.
	// +required
	SecretKeyRef SecretKeyReference `json:"secretKeyRef"`
}

// SecretKeyReference names a key of a Secret in the bot's namespace.
type SecretKeyReference struct {
	// Name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// Key of the value in the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// Recording configures the meeting recording.
type Recording struct {
	// Enabled turns recording on.
	// +optional
	// +kubebuilder:default=false
	Enabled bool `json:"enabled"`
}

// AutomaticLeave holds the timeouts after which the bot leaves by itself.
type AutomaticLeave struct {
	// WaitingRoomTimeout: leave when not admitted from the waiting room by then.
	// +optional
	// +kubebuilder:default="10m"
	WaitingRoomTimeout Duration `json:"waitingRoomTimeout,omitempty"`

	// NoOneJoinedTimeout: leave when nobody else joined by then.
	// +optional
	// +kubebuilder:default="10m"
	NoOneJoinedTimeout Duration `json:"noOneJoinedTimeout,omitempty"`

	// EveryoneLeftTimeout: leave this long after the last other participant left.
	// +optional
	// +kubebuilder:default="30s"
	EveryoneLeftTimeout Duration `json:"everyoneLeftTimeout,omitempty"`

	// InactivityTimeout: leave after this long without anyone speaking.
	// +optional
	// +kubebuilder:default="30m"
	InactivityTimeout Duration `json:"inactivityTimeout,omitempty"`
}

// PoolReference names a BotPool, in the bot's namespace unless it says another.
type PoolReference struct {
	// Name of the BotPool.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Namespace of the BotPool; the bot's own when empty. A pool of another namespace serves
	// the bot only while its spec.allowedNamespaces admits the bot's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="namespace must be a namespace name (a DNS label such as team-a)"
	Namespace string `json:"namespace,omitempty"`
}

// BotReservation is the window a reservation holds a slot of a pool for.
type BotReservation struct {
	// Pool is the pool the slot is held in.
	// +kubebuilder:validation:MaxLength=253
	Pool string `json:"pool"`
	// From is when the bot is bound.
	From metav1.Time `json:"from"`
	// Until is From and the bot's maxDuration (the pool's leaveGracePeriod comes on top).
	Until metav1.Time `json:"until"`
}

// BotStatus is what the bot controller and the bot itself reported.
type BotStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase is where the bot is in its lifecycle.
	// +optional
	Phase BotPhase `json:"phase,omitempty"`

	// Platform is the platform the bot was resolved to (spec.platform or derived from the URL).
	// +optional
	Platform Platform `json:"platform,omitempty"`

	// Pool is the BotPool serving the bot.
	// +optional
	Pool string `json:"pool,omitempty"`

	// PoolNamespace is the namespace of Pool when it is not the bot's own (a pool shared with
	// the bot's namespace); empty otherwise.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	PoolNamespace string `json:"poolNamespace,omitempty"`

	// Tenant is the tenant the bot counts as in its pool's tenancy (its namespace, or the
	// value of the pool's tenancy label); empty when the pool has none.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Tenant string `json:"tenant,omitempty"`

	// SlotName mirrors the BotPoolSlot whose spec.botRef names this bot; kept after release.
	// +optional
	SlotName string `json:"slotName,omitempty"`

	// ApplicationUUID is the Coolify application the bot ran in; kept after release.
	// +optional
	ApplicationUUID string `json:"applicationUUID,omitempty"`

	// Reservation is the window a granted reservation holds in the bot's pool (condition
	// Reserved True): from when the bot is bound (its startTime; on a standby Stopped pool the
	// manager's --schedule-lead before it, as its start is a deployment) for its maxDuration.
	// A spec change that moves the window outside it (a later startTime, a longer maxDuration,
	// another pool) decides the reservation again. Written by the bot controller only.
	// +optional
	Reservation *BotReservation `json:"reservation,omitempty"`

	// QueuedAt is when the bot entered the queue; with priority it fixes the queue order.
	// +optional
	QueuedAt *metav1.Time `json:"queuedAt,omitempty"`

	// QueuePosition is the 1-based place in the pool's queue while Queued (updated sparingly).
	// +optional
	QueuePosition int32 `json:"queuePosition,omitempty"`

	// EstimatedWait is the expected time until a slot is free, from the pool's observed
	// turnaround (updated sparingly).
	// +optional
	EstimatedWait *metav1.Duration `json:"estimatedWait,omitempty"`

	// LastHeartbeat is a coarse copy of the bot's last heartbeat; the exact one lives in the
	// store.
	// +optional
	LastHeartbeat *metav1.Time `json:"lastHeartbeat,omitempty"`

	// StartedAt is when the bot's container started running (its slot turned Busy).
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`

	// LeaveRequestedAt is when the bot was first asked to leave (its deletion); its slot is
	// released leaveGracePeriod later at the latest.
	// +optional
	LeaveRequestedAt *metav1.Time `json:"leaveRequestedAt,omitempty"`

	// FinishedAt is when the bot reached Done or Fatal.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`

	// Reason is a CamelCase word for why the bot is Fatal (QueueTimeout, HeartbeatTimeout…).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Reason BotReason `json:"reason,omitempty"`

	// Message says in words what happened.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// RecordingLocation is where the bot stored its recording, as it reported with Done.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	RecordingLocation string `json:"recordingLocation,omitempty"`

	// Callback records the outcome of the POST to spec.callbackURL, written by the bot
	// controller once the notifier reports it. A bot whose callback is recorded for its phase
	// is never sent that callback again, across restarts and leader changes.
	// +optional
	Callback *CallbackStatus `json:"callback,omitempty"`

	// Webhook records what became of the messages to the bot's webhook (spec.webhook or the
	// pool's webhookDefaults). Written by the bot controller only.
	// +optional
	Webhook *WebhookStatus `json:"webhook,omitempty"`

	// Binding records the claim of the bot's binding: the bot API writes it, with an
	// optimistic lock, when it hands the bot's configuration (and a credential for this bot
	// only) to the container of the slot bound to it. A binding is handed out once: a later
	// config call for it is refused.
	// +optional
	Binding *BindingClaim `json:"binding,omitempty"`

	// StartAttempts records every start that failed under the bot (its slot went to Error
	// before the bot ran), oldest first: each but the last of the bot's maxStartAttempts put
	// the bot back in the queue (a StartRetried Event). Written by the bot controller only.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	StartAttempts []StartAttempt `json:"startAttempts,omitempty"`

	// Conditions: Ready, Bound, Alive.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// StartAttempt is one start of a bot that failed under it.
type StartAttempt struct {
	// SlotName is the slot the start failed in.
	// +required
	// +kubebuilder:validation:MaxLength=253
	SlotName string `json:"slotName"`

	// Server is the Coolify server of that slot (its spec.server); the next start prefers
	// another one. For a bot of another namespace than the slot's (a shared pool), a digest of
	// it: "h-" and 12 hex digits.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Server string `json:"server,omitempty"`

	// Reason is the slot's reason (DeploymentFailed, DeploymentLost…).
	// +required
	// +kubebuilder:validation:MaxLength=128
	Reason BotReason `json:"reason"`

	// Message is the slot's message.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// At is when the bot controller saw the start fail; the bot's queue timeout counts
	// afresh from the last attempt.
	// +required
	At metav1.Time `json:"at"`
}

// CallbackState is the final state of a bot's callback.
// +kubebuilder:validation:Enum=Delivered;Failed
type CallbackState string

// Callback states.
const (
	// CallbackDelivered: the receiver answered 2xx.
	CallbackDelivered CallbackState = "Delivered"
	// CallbackFailed: the receiver refused it (a 4xx, a redirect), the egress policy refused the
	// destination, every attempt failed, or the notifier's queue stayed full; lastError says which.
	// It is not tried again.
	CallbackFailed CallbackState = "Failed"
)

// BindingClaim is the claim of a bot's binding by its slot's container.
type BindingClaim struct {
	// SlotName is the slot whose container claimed the binding.
	// +required
	// +kubebuilder:validation:MaxLength=253
	SlotName string `json:"slotName"`

	// SlotUID is the uid of that slot: the binding credential is valid while this slot's
	// spec.botRef names the bot.
	// +required
	SlotUID types.UID `json:"slotUID"`

	// ClaimedAt is when the container received the bot's configuration.
	// +required
	ClaimedAt metav1.Time `json:"claimedAt"`

	// CredentialSHA256 is the hex SHA-256 of the binding credential handed out with the
	// configuration; the credential itself is kept nowhere.
	// +required
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	CredentialSHA256 string `json:"credentialSHA256"`
}

// CallbackStatus is the outcome of a bot's callback.
type CallbackStatus struct {
	// Phase is the bot phase the callback reported (Done or Fatal).
	// +required
	Phase BotPhase `json:"phase"`

	// State is Delivered or Failed.
	// +required
	State CallbackState `json:"state"`

	// Attempts is how many requests were made; 0 when none could be (an invalid URL, a queue
	// that stayed full).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Attempts int32 `json:"attempts,omitempty"`

	// LastError is the last failure, truncated; empty after a delivery.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	LastError string `json:"lastError,omitempty"`

	// Time is when the outcome was reached.
	// +required
	Time metav1.Time `json:"time"`
}

// Bot is one meeting to join: the operator gives it a warm slot, starts it and returns the
// slot to the pool when the bot is done.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mbot,categories=meetingbots
// +kubebuilder:printcolumn:name="Platform",type=string,JSONPath=`.status.platform`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Slot",type=string,JSONPath=`.status.slotName`
// +kubebuilder:printcolumn:name="Queue position",type=integer,JSONPath=`.status.queuePosition`
// +kubebuilder:printcolumn:name="Start",type=string,JSONPath=`.spec.startTime`,priority=1
// +kubebuilder:printcolumn:name="Reserved",type=string,JSONPath=`.status.conditions[?(@.type=="Reserved")].reason`,priority=1
// +kubebuilder:printcolumn:name="Priority",type=integer,JSONPath=`.spec.priority`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Meeting",type=string,JSONPath=`.spec.meetingUrl`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Bot struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec BotSpec `json:"spec"`
	// +optional
	Status BotStatus `json:"status,omitempty"`
}

// BotList is a list of Bots.
//
// +kubebuilder:object:root=true
type BotList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Bot `json:"items"`
}
