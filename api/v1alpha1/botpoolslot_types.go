package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// StandbyState is where a free slot's standby container is.
// +kubebuilder:validation:Enum=Starting;Ready;Lost
type StandbyState string

const (
	// StandbyStarting: a fresh container is being deployed (with a fresh slot credential),
	// or it runs and has not asked the bot API for work yet. Not offered to bots.
	StandbyStarting StandbyState = "Starting"
	// StandbyReady: the slot's current container asks the bot API for work: a bot bound now
	// learns its binding within a second. The only standby state offered to bots.
	StandbyReady StandbyState = "Ready"
	// StandbyLost: the container stopped asking (crashed, restarting, unreachable); the slot
	// gets a fresh one.
	StandbyLost StandbyState = "Lost"
)

// SlotPhase is where a slot is in its lifecycle:
// Creating → Idle ⇄ (Deploying → Busy) → Releasing → Idle; any → Error → Idle or deleted.
// +kubebuilder:validation:Enum=Creating;Idle;Deploying;Busy;Releasing;Error
type SlotPhase string

const (
	// SlotCreating: the Coolify application is being created or adopted and its env set.
	SlotCreating SlotPhase = "Creating"
	// SlotIdle: the application exists, its container is stopped, no bot is bound.
	SlotIdle SlotPhase = "Idle"
	// SlotDeploying: a bot is bound and its deployment runs.
	SlotDeploying SlotPhase = "Deploying"
	// SlotBusy: the bound bot's container runs.
	SlotBusy SlotPhase = "Busy"
	// SlotReleasing: the bot let go; the container is being stopped.
	SlotReleasing SlotPhase = "Releasing"
	// SlotError: something failed; recovery stops the container and returns the slot to Idle.
	SlotError SlotPhase = "Error"
)

// BotPoolSlotSpec is the desired state of one slot. The operator itself writes botRef when it
// binds a bot; that field is the single source of truth of the bot↔slot relation.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.botRef) || !has(self.botRef) || self.botRef == oldSelf.botRef",message="botRef can only be set on a free slot; clear it before binding another bot"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.server) || (has(self.server) && self.server == oldSelf.server)",message="server is immutable once set"
type BotPoolSlotSpec struct {
	// Pool is the name of the BotPool (same namespace) the slot belongs to. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="pool is immutable"
	Pool string `json:"pool"`

	// Server is the uuid of the Coolify server the slot's application lives on, chosen by
	// the pool when it creates the slot (slots created before it was recorded get the pool's
	// server written once). Immutable once set.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Server string `json:"server,omitempty"`

	// BotRef is the bot bound to this slot; empty when the slot is free.
	// +optional
	BotRef *BotReference `json:"botRef,omitempty"`
}

// BotReference identifies a Bot by name and uid, so a Bot deleted and re-created under the
// same name is never mistaken for the one that was bound.
type BotReference struct {
	// Name of the Bot.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Namespace of the Bot when it is not the slot's own: a bot of a namespace the pool is
	// shared with (spec.allowedNamespaces of the pool).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`

	// UID of the Bot.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	UID types.UID `json:"uid"`
}

// BotPoolSlotStatus is what the slot controller observed.
type BotPoolSlotStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase is where the slot is in its lifecycle.
	// +optional
	Phase SlotPhase `json:"phase,omitempty"`

	// ApplicationUUID is the Coolify application of this slot.
	// +optional
	ApplicationUUID string `json:"applicationUUID,omitempty"`

	// ApplicationTag is the Coolify tag the application carries (the pool's tag with this
	// cluster's identity). Empty on applications created before tags carried a cluster
	// identity: those carry the legacy tag. Written by the slot controller only.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ApplicationTag string `json:"applicationTag,omitempty"`

	// CoolifyInstance identifies the Coolify instance holding the application: a hash of its
	// base URL (never the token). A pool whose credentials now name another instance stalls
	// instead of leaking the application. Written by the slot controller only.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	CoolifyInstance string `json:"coolifyInstance,omitempty"`

	// Standby is the state of the free slot's standby container (pools with standby
	// Running); empty when the slot has none. Written by the slot controller only.
	// +optional
	Standby StandbyState `json:"standby,omitempty"`
	// StandbySince is when the slot's current standby container was requested (Starting,
	// Ready: its asks count from then), or when it was found Lost.
	// +optional
	StandbySince *metav1.Time `json:"standbySince,omitempty"`

	// DrainingSince is when the deleted slot first asked its running bot to leave; the
	// application is deleted once the bot left or leaveGracePeriod passed.
	// +optional
	DrainingSince *metav1.Time `json:"drainingSince,omitempty"`
	// TokenSHA256 is the hex SHA-256 of the bot API token the operator issued to this slot's
	// containers (kept in the Secret <slot>-token). Written by the slot controller only; the
	// bot API accepts exactly the token with this hash, never another Secret's.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	TokenSHA256 string `json:"tokenSHA256,omitempty"`

	// DeploymentUUID is the Coolify deployment in flight or last run.
	// +optional
	DeploymentUUID string `json:"deploymentUUID,omitempty"`

	// PhaseSince is when the slot entered its current phase; for Deploying, when the
	// deployment was requested (deployGracePeriod and deploymentTimeout count from it).
	// +optional
	PhaseSince *metav1.Time `json:"phaseSince,omitempty"`

	// DeployingSince starts the stale-deploying clock (deployingTimeout): the deploy request,
	// restarted each time a recovery is skipped because the bot still beats.
	// +optional
	DeployingSince *metav1.Time `json:"deployingSince,omitempty"`

	// LastUsedAt is when the slot was last released; binding prefers the least recently used.
	// +optional
	LastUsedAt *metav1.Time `json:"lastUsedAt,omitempty"`

	// RecoveryAttempts counts failed recoveries from Error since the slot was last healthy.
	// +optional
	RecoveryAttempts int32 `json:"recoveryAttempts,omitempty"`

	// SkippedRecoveries counts stale-deploying recoveries skipped because the bot still beats.
	// +optional
	SkippedRecoveries int32 `json:"skippedRecoveries,omitempty"`

	// Reason is a CamelCase word for why the slot is in Error (DeploymentFailed,
	// DeploymentTimeout, DeployingTimeout, ApplicationLost, StopFailed…); the bound bot
	// fails with it.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason,omitempty"`

	// Message says in words what the slot is doing or what went wrong.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// Conditions: Ready, Reconciling, Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// TemplateHash is the pool template (BotPool.status.templateHash) the slot's application
	// was last given: image, tag, limits and env. The slot is up to date when it equals the
	// pool's. Written by the slot controller only.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TemplateHash string `json:"templateHash,omitempty"`

	// Image is the image reference (image:tag) the slot's application was last given. Written
	// by the slot controller only.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// LastDeployDuration is how long the slot's last deployment (a bot's, or a standby
	// container's) took from its request until the container was found started: seconds on a
	// warm image, minutes on a cold pull. One far slower than a warm start suggests its server
	// lost the image from its cache (the pool pulls each image again a day after its last
	// pull). Written by the slot controller only.
	// +optional
	LastDeployDuration *metav1.Duration `json:"lastDeployDuration,omitempty"`
}

// BotPoolSlot is one Coolify application of a pool, with the bot image cached on its server.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=bps;slot,categories=meetingbots
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.pool`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Bot",type=string,JSONPath=`.spec.botRef.name`
// +kubebuilder:printcolumn:name="Standby",type=string,JSONPath=`.status.standby`
// +kubebuilder:printcolumn:name="Application",type=string,JSONPath=`.status.applicationUUID`
// +kubebuilder:printcolumn:name="Server",type=string,JSONPath=`.spec.server`,priority=1
// +kubebuilder:printcolumn:name="Last used",type=date,JSONPath=`.status.lastUsedAt`
// +kubebuilder:printcolumn:name="Deployment",type=string,JSONPath=`.status.deploymentUUID`,priority=1
// +kubebuilder:printcolumn:name="Recoveries",type=integer,JSONPath=`.status.recoveryAttempts`,priority=1
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.status.image`,priority=1
// +kubebuilder:printcolumn:name="Template",type=string,JSONPath=`.status.templateHash`,priority=1
// +kubebuilder:printcolumn:name="Last deploy",type=string,JSONPath=`.status.lastDeployDuration`,priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BotPoolSlot struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec BotPoolSlotSpec `json:"spec"`
	// +optional
	Status BotPoolSlotStatus `json:"status,omitempty"`
}

// BotPoolSlotList is a list of BotPoolSlots.
//
// +kubebuilder:object:root=true
type BotPoolSlotList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BotPoolSlot `json:"items"`
}
