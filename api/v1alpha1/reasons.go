package v1alpha1

// The reasons the controllers give besides those next to the conditions they belong to
// (conditions.go, bot_conditions.go, botpool_types.go). They are part of the API: users match
// on them in alerts, `kubectl wait` and GitOps health checks, so each is listed in the docs
// (TestDocReasons) and none changes its word.

// Reasons a slot goes to Error (its status.reason). The bot bound to the slot ends Fatal with
// the same word, which is why they are BotReasons; ReasonDeploymentFailed and
// ReasonDeployingTimeout are among them.
const (
	// ReasonDeploymentTimeout: the deployment stayed queued or in progress past
	// deploymentTimeout, and the bot sent no recent heartbeat.
	ReasonDeploymentTimeout BotReason = "DeploymentTimeout"
	// ReasonDeploymentLost: no deployment of the application can be found and its container
	// does not run, past deployGracePeriod.
	ReasonDeploymentLost BotReason = "DeploymentLost"
	// ReasonApplicationLost: the slot's Coolify application was deleted behind the operator's
	// back. A slot without a bot also moves to Creating with this reason.
	ReasonApplicationLost BotReason = "ApplicationLost"
	// ReasonStopFailed: stopping the container failed.
	ReasonStopFailed BotReason = "StopFailed"
	// ReasonStandbyLost: a standby slot's container did not take the bot bound to it within
	// the standby ask window (it crashed or stopped asking between its last ask and the
	// binding). A free standby slot that stops asking gets a fresh container instead (a
	// StandbyLost Warning Event) and fails nothing.
	ReasonStandbyLost BotReason = "StandbyLost"
)

// Reasons of a Stalled slot besides the pool's credential reasons; ReasonDestinationRefused
// stalls the pool too, and ReasonCoolifyThrottled is the pool's Ready reason while it waits.
const (
	// ReasonRequestRefused: Coolify refused the request as invalid (422/400), e.g. resources
	// or an env variable its validation rejects.
	ReasonRequestRefused = "RequestRefused"
	// ReasonSlotEnvNotFound: the pool's slotEnvFrom Secret does not exist.
	ReasonSlotEnvNotFound = "SlotEnvSecretNotFound"
	// ReasonSlotEnvNotAllowed: the slotEnvFrom Secret lacks the label LabelAllowPoolUse.
	ReasonSlotEnvNotAllowed = "SlotEnvSecretNotAllowed"
	// ReasonTokenSecretTaken: a Secret has the name of the slot's token Secret
	// (<slot>-token) but is not one the operator made for a slot of that name (its label and
	// controller reference): the operator does not delete a Secret it did not make, and the
	// slot cannot issue its token until a person renames or deletes that one.
	ReasonTokenSecretTaken = "TokenSecretTaken"
	// ReasonDestinationRefused: the Coolify URL resolves to an address the manager's egress
	// policy refuses (loopback, link-local, or a private range not allowed).
	ReasonDestinationRefused = "DestinationRefused"
	// ReasonCoolifyThrottled: Coolify's rate limit is used up, or the instance is not
	// answering and the client holds calls back; the pool waits, it is not broken.
	ReasonCoolifyThrottled = "CoolifyThrottled"
)

// Reasons of the Bot conditions Ready and Bound while the bot has not ended.
const (
	// ReasonWaiting: the bot waits in the queue for a free slot (Ready False, Bound False).
	ReasonWaiting = "Waiting"
	// ReasonScheduled: the bot waits for its start time (Ready False).
	ReasonScheduled = "Scheduled"
	// ReasonBound: the bot holds a slot (Bound True); also the Event of its binding.
	ReasonBound = "Bound"
	// ReasonRunning: the bot's container runs in its slot (Ready True).
	ReasonRunning = "Running"
)

// Reasons of the Alive condition besides ReasonHeartbeatReceived. A bot that has not beaten
// yet has no Alive condition until its first beat or the end of its grace period.
const (
	// ReasonHeartbeatMissed: no heartbeat for heartbeatGracePeriod (Alive False).
	ReasonHeartbeatMissed = "HeartbeatMissed"
	// ReasonLivenessUnknown: the liveness store cannot answer (Alive Unknown); nobody is
	// failed meanwhile.
	ReasonLivenessUnknown = "LivenessUnknown"
)

// Reasons of Events and transitions.
const (
	// ReasonCallbackDelivered: a bot's callback was delivered (Normal Event).
	ReasonCallbackDelivered = "CallbackDelivered"
	// ReasonCallbackFailed: a bot's callback was given up (Warning Event).
	ReasonCallbackFailed = "CallbackFailed"
	// ReasonWebhookFailed: a message to a bot's webhook was given up (Warning Event).
	ReasonWebhookFailed = "WebhookFailed"
	// ReasonWebhookSecretNotFound: the webhook's signing Secret or its key is missing (Warning
	// Event; no message is made until it exists).
	ReasonWebhookSecretNotFound = "WebhookSecretNotFound"
	// ReasonWebhookSecretInvalid: the webhook's signing key is there but unusable: empty, not
	// base64 after whsec_, or larger than 1 KiB decoded (Warning Event; no message is made
	// until it is fixed).
	ReasonWebhookSecretInvalid = "WebhookSecretInvalid"
	// ReasonWebhookSecretNotAllowed: the webhook's signing Secret lacks the label
	// botpool.dev/allow-pool-use=true (Warning Event; no message is made until it has it).
	ReasonWebhookSecretNotAllowed = "WebhookSecretNotAllowed"
	// ReasonDeleting: a deleted pool deletes its slots and their applications (Ready False,
	// Reconciling True), once no bot is left to drain.
	ReasonDeleting = "Deleting"
	// ReasonSlotsCreated: the pool created slots (Normal Event).
	ReasonSlotsCreated = "SlotsCreated"
	// ReasonSlotsRemoved: the pool removed slots above maxSlots, above a server's maxSlots,
	// from a server that is cordoned or no longer listed, or free for scaleDownDelay above the
	// minIdle in force and the waiting bots (Normal Event).
	ReasonSlotsRemoved = "SlotsRemoved"
	// ReasonServersFull: the pool wants more slots, but every server is cordoned or at its
	// maxSlots (Reconciling).
	ReasonServersFull = "ServersFull"
	// ReasonOrphanRunning: an application of the pool that no slot owns still runs, so it is
	// left alone (Warning Event).
	ReasonOrphanRunning = "OrphanRunning"
	// ReasonOrphanDeleted: a stopped application of the pool that no slot owns was deleted
	// (Normal Event).
	ReasonOrphanDeleted = "OrphanDeleted"
	// ReasonCleanupBlocked: a deleted slot cannot reach Coolify to delete its application and
	// waits until it can, or until it or its pool is annotated to let the application go
	// (Warning Event).
	ReasonCleanupBlocked = "CleanupBlocked"
	// ReasonAdoptionRefused: a slot found an application with its name and the pool's tag
	// but another image or placement (its own create whose answer was lost), and does not
	// adopt it: it deletes it when stopped (Normal Event) before creating its own, or waits
	// for a person while it runs (Warning Event).
	ReasonAdoptionRefused = "AdoptionRefused"
	// ReasonRecoverySkipped: a slot Deploying past deployingTimeout skipped its recovery
	// because its bot beats (Normal Event).
	ReasonRecoverySkipped = "RecoverySkipped"
	// ReasonRecovered: a slot in Error stopped its container and is Idle again (the
	// transition's Event).
	ReasonRecovered = "Recovered"
	// ReasonSlotRetired: a slot failed maxRecoveryAttempts times in a row and is deleted with
	// its application (Warning Event).
	ReasonSlotRetired = "SlotRetired"
	// ReasonStandbyReady: a standby slot's fresh container asked the bot API for work (a
	// Normal Event; the slot is offered to bots from now on).
	ReasonStandbyReady = "StandbyReady"
	// ReasonWarmingStandby: a pool with standby Running has fewer ready standby slots than
	// minIdle (its Reconciling condition, while fresh containers start).
	ReasonWarmingStandby = "WarmingStandby"
	// ReasonServerRunsFewer: the pool's maxConcurrentDeployments exceeds what its Coolify
	// server runs at once, which bounds the pool's deployments instead (DeploymentsCapped).
	ReasonServerRunsFewer = "ServerRunsFewer"
	// ReasonServerNotFunctional: Coolify reports a server of the pool unreachable or unusable
	// (ServerOut).
	ReasonServerNotFunctional = "ServerNotFunctional"
	// ReasonStartRetried: a bot's start failed under it for a reason of the infrastructure
	// before it ran, and it went back to the head of its queue for another start (Warning
	// Event on the Bot, and an audit row).
	ReasonStartRetried = "StartRetried"
)

// Reasons of the bot API's Events.
const (
	// ReasonBindingClaimedTwice: a config call found the bot's binding already handed out to a
	// container and was refused (Warning Event on the Bot, and an audit row).
	ReasonBindingClaimedTwice = "BindingClaimedTwice"
)

// Reasons of rollouts: a pool's template (image, tag, resources, env, restart annotation)
// pre-pulled on each server, then given to its slots.
const (
	// ReasonPullingImage: the pool's template image is being pulled on some server
	// (Reconciling, SlotsUpdated False), or no server holds an image a slot of the pool can
	// start warm yet (Ready False).
	ReasonPullingImage = "PullingImage"
	// ReasonRollingOut: the template image is on every server, and slots are being given the
	// new template (Reconciling, SlotsUpdated False); busy slots follow when their bots end.
	ReasonRollingOut = "RollingOut"
	// ReasonImagePullFailed: a pre-pull of the template image failed on a server (an unknown
	// tag, a registry that wants a login): no slot is updated until it succeeds, and the old
	// slots keep serving (Stalled, SlotsUpdated False, and a Warning Event).
	ReasonImagePullFailed = "ImagePullFailed"
	// ReasonNoUsableServer: every server of the pool is cordoned or out, so the template image
	// is pulled nowhere and no slot can be given it until one is back (Reconciling,
	// SlotsUpdated False). Not Stalled: uncordoning or a server's return resumes it.
	ReasonNoUsableServer = "NoUsableServer"
	// ReasonInvalidWarmSchedule: a window of spec.warmSchedule has a schedule or time zone the
	// manager cannot read; it is ignored, and the others apply (Stalled).
	ReasonInvalidWarmSchedule = "InvalidWarmSchedule"
	// ReasonUpToDate: every slot is built from the pool's current template (SlotsUpdated True).
	ReasonUpToDate = "UpToDate"
	// ReasonFloatingTag: the pool's imageTag is one registries move (latest, main, stable…)
	// (MutableTag True, and a Warning Event once per generation).
	ReasonFloatingTag = "FloatingTag"
	// ReasonSlotUpdated: a slot's application was given the pool's current template (Normal
	// Event on the slot).
	ReasonSlotUpdated = "SlotUpdated"
	// ReasonImagePulled: a pre-pull finished on a server (Normal Event).
	ReasonImagePulled = "ImagePulled"
	// ReasonImagePullStarted: a pre-pull began on a server (Normal Event).
	ReasonImagePullStarted = "ImagePullStarted"
	// ReasonRolloutStarted: the pool's template changed and its slots are to follow (Normal
	// Event).
	ReasonRolloutStarted = "RolloutStarted"
	// ReasonRolloutComplete: every slot is built from the pool's current template (Normal
	// Event).
	ReasonRolloutComplete = "RolloutComplete"
)

// Reasons of the Reserved condition of a scheduled Bot.
const (
	// ReasonCapacityReserved: a slot of the pool is held for the bot's start (Reserved True).
	ReasonCapacityReserved = "CapacityReserved"
	// ReasonBeyondHorizon: the bot's startTime is further ahead than the pool's
	// reservations.maxHorizon: its reservation is decided once its start comes within it.
	ReasonBeyondHorizon = "BeyondHorizon"
	// ReasonTooLate: the bot was created less than the reservation lead before its start; it is
	// served like an ad-hoc bot (Reserved False).
	ReasonTooLate = "TooLate"
	// ReasonPoolFull: the pool's maxSlots are promised or taken at some moment of the bot's
	// meeting (Reserved False).
	ReasonPoolFull = "PoolFull"
	// ReasonTenantLimit: a queued bot's tenant holds as many of the pool's slots as its limit
	// (spec.tenancy): the bot's Ready reason while it waits for one of its tenant's bots to
	// end; its queuePosition is its place among its tenant's waiting bots.
	ReasonTenantLimit = "TenantLimit"
	// ReasonReservationLate: a reserved bot found no slot ready 30 seconds after its start
	// (the bot's Ready False, and a Warning Event); the message repeats what the pool's
	// conditions say went wrong. It is bound first as soon as a slot is.
	ReasonReservationLate = "ReservationLate"
)

// Reasons of the ParametersReady condition of a Bot. While it is False the bot is not bound,
// and a Warning Event with the reason says so once.
const (
	// ReasonParametersResolved: every Secret of spec.secretParameters can be read and the
	// parameters fit (ParametersReady True).
	ReasonParametersResolved = "ParametersResolved"
	// ReasonParameterSecretNotFound: a Secret of spec.secretParameters, or its key, does not
	// exist.
	ReasonParameterSecretNotFound = "ParameterSecretNotFound"
	// ReasonParameterSecretNotAllowed: a Secret of spec.secretParameters lacks the label
	// LabelAllowBotParameters.
	ReasonParameterSecretNotAllowed = "ParameterSecretNotAllowed"
	// ReasonParameterSecretTooLarge: a secret parameter's value is over 8 KiB, or all of them
	// together over 32 KiB.
	ReasonParameterSecretTooLarge = "ParameterSecretTooLarge"
	// ReasonParameterSecretInvalid: a secret parameter's value is not UTF-8 text.
	ReasonParameterSecretInvalid = "ParameterSecretInvalid"
	// ReasonParametersTooLarge: spec.parameters merged over the pool's parameterDefaults is
	// over 32 KiB.
	ReasonParametersTooLarge = "ParametersTooLarge"
)
