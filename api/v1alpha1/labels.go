package v1alpha1

// Labels and annotations the operator reads or writes.
const (
	// LabelPool is set on every BotPoolSlot with the name of its BotPool.
	LabelPool = "botpool.dev/pool"
	// LabelSlot is set on a slot's token Secret with the slot's name.
	LabelSlot = "botpool.dev/slot"
	// LabelSlotToken marks the Secrets holding slot tokens. The manager caches only Secrets
	// with this label, never every Secret of the cluster.
	LabelSlotToken = "botpool.dev/slot-token"

	// AnnotationLogLevel on a Bot sets the log level its container is told to use in every
	// heartbeat answer: debug, info, warn or error.
	AnnotationLogLevel = "botpool.dev/log-level"
)
