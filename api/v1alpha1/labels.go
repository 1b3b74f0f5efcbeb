package v1alpha1

// Finalizers the operator sets: each holds an object until what it stands for is gone.
const (
	// FinalizerBot holds a deleted Bot until its container had its leaveGracePeriod to leave
	// the meeting and its slot is released.
	FinalizerBot = "botpool.dev/slot"
	// FinalizerSlot holds a BotPoolSlot until its Coolify application is stopped and deleted.
	FinalizerSlot = "botpool.dev/application"
	// FinalizerPool holds a BotPool until its slots (and through their own finalizers, the
	// Coolify applications) are gone.
	FinalizerPool = "botpool.dev/slots"
)

// Labels and annotations the operator reads or writes.
const (
	// LabelPool is set on every BotPoolSlot with the name of its BotPool.
	LabelPool = "botpool.dev/pool"
	// LabelSlot is set on a slot's token Secret with the slot's name.
	LabelSlot = "botpool.dev/slot"
	// LabelSlotToken marks the Secrets holding slot tokens, for people and tools: the operator
	// itself finds a slot's token Secret by name and trusts it only while it holds the token
	// whose hash the slot records (status.tokenSHA256).
	LabelSlotToken = "botpool.dev/slot-token"

	// LabelAllowPoolUse, set to "true" on a Secret, lets BotPools of its namespace use it as
	// their credentialsSecretRef or slotEnvFrom. Without it the operator refuses the Secret:
	// a pool copies slotEnvFrom into the env of an image its author picks, and the credentials
	// into requests to a URL its author picks, so without the opt-in, the right to edit a
	// BotPool would be the right to read every Secret of the namespace.
	LabelAllowPoolUse = "botpool.dev/allow-pool-use"
	// LabelAllowWebhookSigning, set to "true" on a Secret, lets Bots of its namespace (and
	// their pools' webhookDefaults) sign webhooks with one of its keys. A label of its own:
	// a Secret opted in for pools (Coolify credentials, slot env) must not become a key
	// anyone who may create a Bot can have the operator compute HMACs with.
	LabelAllowWebhookSigning = "botpool.dev/allow-webhook-signing"
	// LabelAllowBotParameters, set to "true" on a Secret, lets Bots of its namespace name its
	// keys in spec.secretParameters, which hands them to the bot's container. A label of its
	// own: a Secret opted in for pools or for webhook signing must not become readable by
	// anyone who may create a Bot and run an image.
	LabelAllowBotParameters = "botpool.dev/allow-bot-parameters"

	// AnnotationLogLevel on a Bot sets the log level its container is told to use in every
	// heartbeat answer: debug, info, warn or error.
	AnnotationLogLevel = "botpool.dev/log-level"

	// AnnotationRestartedAt on a BotPool, set by the user to a new value (a timestamp such as
	// 2026-11-25T20:00:00Z, at most MaxRestartedAtLength characters), rolls the pool's slots
	// out again with the same template: the image is pulled again on every server first, so a
	// new push of the same tag reaches every slot off the start path. The counterpart of
	// kubectl.kubernetes.io/restartedAt, which `kubectl rollout restart` does not set on
	// custom resources.
	AnnotationRestartedAt = "botpool.dev/restartedAt"
	// AnnotationUpdate on a BotPoolSlot is set by the pool controller only, to the template
	// hash the slot may now move to: in a pool with standby Running, updating a free slot
	// replaces its ready container, so the pool admits slots one batch at a time within
	// spec.updateStrategy. The pool takes it off again once the slot is Ready on that
	// template.
	AnnotationUpdate = "botpool.dev/update"
	// AnnotationOrphanApplication set to "true" on a BotPoolSlot lets the slot go without
	// cleaning Coolify up (its application may leak), for when the instance or its credentials
	// are gone for good; on a BotPool it does so for every slot of the pool, and for the
	// pool's puller applications.
	AnnotationOrphanApplication = "botpool.dev/orphan-application"
)

// MaxRestartedAtLength is the longest botpool.dev/restartedAt value the pool records in its
// status (servers[].cached[].restartedAt); only that many first characters count, for the
// template hash as for the pulls.
const MaxRestartedAtLength = 64
