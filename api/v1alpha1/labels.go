package v1alpha1

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

	// AnnotationLogLevel on a Bot sets the log level its container is told to use in every
	// heartbeat answer: debug, info, warn or error.
	AnnotationLogLevel = "botpool.dev/log-level"
)
