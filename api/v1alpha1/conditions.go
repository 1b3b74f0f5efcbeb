package v1alpha1

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SetCondition sets c in conds as meta.SetStatusCondition does, with lastTransitionTime at
// when its status changes: time comes from the caller's clock (an injected one in the
// controllers), not from metav1.Now(). A zero at falls back to now. It reports whether
// anything changed.
func SetCondition(conds *[]metav1.Condition, c metav1.Condition, at time.Time) bool {
	if !at.IsZero() {
		c.LastTransitionTime = metav1.NewTime(at)
	}
	return meta.SetStatusCondition(conds, c)
}

// Condition types. Ready, Reconciling and Stalled follow kstatus, so `kubectl wait` and GitOps
// health checks understand every kind; the others are domain conditions.
const (
	// ConditionReady is True when the object is doing what its spec asks.
	ConditionReady = "Ready"
	// ConditionReconciling is True while the controller works towards the spec.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True when progress needs a human (bad credentials, missing Secret…).
	ConditionStalled = "Stalled"
	// ConditionBound is True on a Bot that holds a slot.
	ConditionBound = "Bound"
	// ConditionAlive is True on a Bot whose container sends heartbeats.
	ConditionAlive = "Alive"
	// ConditionDeploymentsCapped is True on a BotPool whose maxConcurrentDeployments asks for
	// more deployments at once than its Coolify server runs (concurrent_builds): advice, it
	// leaves Ready as it is. Absent otherwise, and while the server's settings are unknown.
	ConditionDeploymentsCapped = "DeploymentsCapped"
	// ConditionServerOut is True on a BotPool while Coolify reports one of its servers
	// unreachable or unusable: that server's free slots are not offered and new slots go to
	// the others. The message names the servers.
	ConditionServerOut = "ServerOut"
	// ConditionSlotsUpdated is on every BotPool: True (UpToDate) when every slot is built from
	// the pool's current template, False while a pre-pull or a rollout runs or a pre-pull failed
	// (PullingImage, RollingOut, ImagePullFailed). Always present, so
	// `kubectl wait --for=condition=SlotsUpdated` can wait for a rollout to end.
	ConditionSlotsUpdated = "SlotsUpdated"
	// ConditionMutableTag is True on a BotPool whose imageTag may change in the registry
	// (FloatingTag): any deployment, a bot's start included, may pull a new image cold.
	// Advice: it leaves Ready as it is. Absent otherwise.
	ConditionMutableTag = "MutableTag"
	// ConditionReserved is on a Bot with a startTime: True (CapacityReserved) when a slot of its
	// pool is held for its start, False (TooLate, PoolFull) with why not. Absent on ad-hoc bots.
	ConditionReserved = "Reserved"
	// ConditionParametersReady is on a Bot with secretParameters or parameters: True
	// (ParametersResolved) when every Secret it names can be read and its parameters fit,
	// False with why not (ParameterSecretNotFound, ParameterSecretNotAllowed,
	// ParameterSecretTooLarge, ParameterSecretInvalid, ParametersTooLarge). While it is False
	// the bot waits in its queue and is not bound. Absent on bots with neither.
	ConditionParametersReady = "ParametersReady"
)

// BotReason says why a Bot ended in Fatal (status.reason) or why a condition has its status.
type BotReason string

const (
	// ReasonQueueTimeout: no slot became free within the bot's queue timeout.
	ReasonQueueTimeout BotReason = "QueueTimeout"
	// ReasonDeploymentFailed: the deployment of the bot's slot failed or was cancelled.
	ReasonDeploymentFailed BotReason = "DeploymentFailed"
	// ReasonHeartbeatTimeout: a running bot sent no heartbeat for heartbeatTimeout.
	ReasonHeartbeatTimeout BotReason = "HeartbeatTimeout"
	// ReasonDeployingTimeout: the slot was Deploying past deployingTimeout without a recent
	// heartbeat of the bot.
	ReasonDeployingTimeout BotReason = "DeployingTimeout"
	// ReasonSlotLost: the bot's slot was deleted, and the bot did not leave within the drain
	// (or the slot went outright).
	ReasonSlotLost BotReason = "SlotLost"
	// ReasonMaxDuration: the bot ran past maxDuration and did not leave within
	// leaveGracePeriod.
	ReasonMaxDuration BotReason = "MaxDuration"
	// ReasonPoolNotFound: no BotPool serves the bot: its Ready reason while it waits for one,
	// and the Stalled reason of a slot whose pool is gone.
	ReasonPoolNotFound BotReason = "PoolNotFound"
	// ReasonPoolNotAllowed: the pool the bot names (or the shared pool it was routed to)
	// does not admit the bot's namespace (its spec.allowedNamespaces), or admits it no longer:
	// the bot's Ready reason while it waits in Pending. A bot already bound keeps its slot.
	ReasonPoolNotAllowed BotReason = "PoolNotAllowed"
	// ReasonBotReported: the bot reported Fatal without a reason of its own.
	ReasonBotReported BotReason = "BotReported"
	// ReasonDuplicate: another Bot of the pool with the same deduplication key holds the
	// meeting (it is bound, or was created first and has not ended); the message names it.
	ReasonDuplicate BotReason = "Duplicate"
)

// Reasons of the pool conditions.
const (
	// ReasonAvailable: the pool reaches Coolify and can serve bots.
	ReasonAvailable = "Available"
	// ReasonScalingUp: the pool is creating slots.
	ReasonScalingUp = "ScalingUp"
	// ReasonCoolifyUnreachable: Coolify did not answer; retried with backoff.
	ReasonCoolifyUnreachable = "CoolifyUnreachable"
	// ReasonCredentialsNotFound: the credentials Secret does not exist.
	ReasonCredentialsNotFound = "CredentialsSecretNotFound"
	// ReasonCredentialsInvalid: the credentials Secret lacks `url` or `token`, or the URL is bad.
	ReasonCredentialsInvalid = "CredentialsSecretInvalid"
	// ReasonCredentialsNotAllowed: the credentials Secret lacks the label LabelAllowPoolUse.
	ReasonCredentialsNotAllowed = "CredentialsSecretNotAllowed"
	// ReasonCredentialsRejected: Coolify refused the token (401).
	ReasonCredentialsRejected = "CredentialsRejected"
	// ReasonAPIDisabled: the Coolify API is switched off (Settings → Advanced → API Access).
	ReasonAPIDisabled = "APIDisabled"
	// ReasonPermissionDenied: the token lacks an ability (read, write and deploy are needed).
	ReasonPermissionDenied = "PermissionDenied"
)
