// Package policy holds the pure decisions two or more of the controllers read: when a slot
// is free, the order of a queue, the release deadlines, what a bot's status says, the slot
// template and its hash, the images each server may give a slot, a pool's servers as its
// status says, the reservations' arithmetic, a bot's liveness. It does no I/O: it imports no
// client, clock, store, network or Coolify client (the tests of controllers/internal/layout
// keeps it so), so every decision here is a function of its arguments, tested without an
// API server.
//
// # Where things are
//
//	free.go              the "is this slot free?" predicates side by side (IsFree, Removable, Available, Offered)
//	release.go           the release rules the bot and slot controllers both read (LeaveDeadline, DrainDeadline)
//	queue_order.go       the order of a queue and of free slots (QueueLess, SlotLess, Reserved, PositionChanged)
//	dedup.go             one bot per meeting: a bot's deduplication key (DeduplicationKey) and which bot of a key holds it (Holder)
//	bot_state.go         what a Bot's status says that several controllers read (BotStarted, BoundSince, FailedSince)
//	template.go          the slot template and its hash (SlotTemplate, SecretDigest, FloatingTag), rollout arithmetic (RolloutBudget), Outdated
//	images.go            the images each server may give a slot (ImagesOf, FreshCached, CachedOn, CreateImage, TemplateReady), the pull back-off
//	server_state.go      a pool's servers as its spec and status say (SlotServer, ServerState, HealthOf, TakesBots, OutBecause), the Failing rule's constants
//	reservation_math.go  reservations' arithmetic and decision (Hold, PeakHolds, RoomFor, HoldsOf, DecideReservation, KeepsReservations)
//	admission.go         shared pools: whether a pool admits a namespace (Admits, Shared), what a bot of another namespace may say of its pool and slot (NotAllowedMessage, SlotMessage)
//	fair_share.go        tenants of a pool: a bot's tenant (TenantOf), its share (ShareOf), the order free slots go in (FairOrder), TenantHeld
//	liveness.go          what the store said of a bot's heartbeats (Liveness, BeatWithin)
//	secretuse.go         the opt-in label a Secret needs before a pool may use it (AllowedForPools)
//	stray.go             StrayAfter: how long a free slot's application may still read running after its container stopped
//	text.go              Abbreviate: a list of names cut for an Event or a log line
//	times.go             OrDefault and SameTime, used by several controllers
package policy
