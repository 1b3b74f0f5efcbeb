package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// ErrSeqTaken: a message of the same bot with the same Seq but another ID exists.
var ErrSeqTaken = errors.New("the bot already has a webhook message with this sequence number")

// OutboxState is where a webhook message stands.
type OutboxState string

// Outbox states.
const (
	// OutboxPending: not delivered yet; tried again at NextAttemptAt.
	OutboxPending OutboxState = "pending"
	// OutboxDelivered: the receiver answered 2xx.
	OutboxDelivered OutboxState = "delivered"
	// OutboxFailed: given up (rejected, or still failing after the retry window).
	OutboxFailed OutboxState = "failed"
)

// OutboxMessage is one webhook message: a bot phase change to POST, signed, until delivered or
// given up. The signing secret is never stored, only where to read it.
type OutboxMessage struct {
	// ID is the message's webhook-id, unique and stable across retries (bot uid, sequence and
	// phase). Adding a message whose ID exists changes nothing.
	ID     string
	BotUID types.UID
	// Seq orders a bot's messages: one is claimed only after every earlier one of its bot
	// was delivered or given up, so a receiver gets a bot's phases in order.
	Seq       int64
	Namespace string
	Name      string
	Phase     string
	URL       string
	// Payload is the body, sent byte for byte (it is what the signature covers).
	Payload json.RawMessage
	// SecretName and SecretKey name the signing Secret's key in Namespace; empty: unsigned.
	SecretName string
	SecretKey  string
	CreatedAt  time.Time

	// Written by the store and FinishAttempt.
	State         OutboxState
	Attempts      int // attempts made, the claimed one included once claimed
	NextAttemptAt time.Time
	LastError     string
}

// OutboxOutcome is the result of one claimed attempt.
type OutboxOutcome struct {
	// Attempt is the Attempts of the claim the outcome is of: it fences late outcomes. A claim
	// whose lease ran out may be claimed again (Attempts+1); the first claimer's outcome,
	// arriving after that, changes nothing, so it can neither clear the live claim's lease nor
	// finish the message under it.
	Attempt int
	// State is OutboxDelivered, OutboxFailed, or OutboxPending to try again at NextAttemptAt.
	State         OutboxState
	NextAttemptAt time.Time
	Error         string
}

// OutboxSummary is what became of one bot's messages, for its status.webhook.
type OutboxSummary struct {
	// LastSeq and LastPhase are the Seq and Phase of the bot's latest message (0 and "" when
	// it has none): the bot controller numbers the next message after it, and makes none when
	// the phase already has one, even if the status write that counted it was lost.
	LastSeq   int64
	LastPhase string
	// Pending counts the bot's messages not finished. Delivered and Failed count its finished
	// messages numbered above the summary's after: a bot's messages finish in Seq order, so
	// the caller counts each once by passing the FinishedThrough it counted up to, even after
	// the outbox forgot the older ones.
	Pending, Delivered, Failed int
	// FinishedThrough is the highest Seq of the bot's finished messages (0 when none).
	FinishedThrough int64
	// DeliveredPhase is the phase of the delivered message with the highest Seq.
	DeliveredPhase string
	// LastError is the error of the latest failed attempt of any message, "" when none failed.
	LastError string
}

// OutboxStats describe the backlog, for metrics.
type OutboxStats struct {
	// Pending counts the messages not delivered nor given up.
	Pending int
	// OldestDue is the NextAttemptAt of the longest-waiting message that could be claimed now
	// (the first pending one of its bot, due, not under a live lease); zero when none could.
	// Messages behind their bot's first one, or being sent, are not waiting on the relay.
	OldestDue time.Time
}

// Outbox keeps webhook messages until they are delivered or given up. The bot controller adds
// them; the webhook dispatcher (leader only) claims the due ones, sends them and records each
// attempt. Postgres keeps them across restarts and leader changes; the memory store loses them
// on restart. Times are passed in (the caller's injected clock), kept to the microsecond.
type Outbox interface {
	// AddMessage stores m as pending, due at once; nothing changes when its ID exists. Another
	// message of the same bot with the same Seq is refused (ErrSeqTaken): a bot's messages are
	// numbered once.
	AddMessage(ctx context.Context, m OutboxMessage) error
	// ClaimMessages hands out up to limit due messages (pending, NextAttemptAt <= now, not
	// claimed by a live lease, the first pending one of their bot), counting the attempt and
	// leasing each until now+lease: a claimer that dies before FinishAttempt loses its claim
	// when the lease ends, and another claims the message again. Concurrent claimers never
	// get the same message while its lease runs. Namespaces take turns: the oldest due message
	// of each namespace comes before the second of any, so one tenant's backlog cannot fill
	// every batch.
	ClaimMessages(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]OutboxMessage, error)
	// FinishAttempt records the outcome of the claimed attempt o.Attempt and releases the
	// claim; an outcome of any other attempt, or of a finished message, changes nothing.
	FinishAttempt(ctx context.Context, id string, o OutboxOutcome) error
	// OutboxSummary sums up one bot's messages; finished ones count only above Seq after.
	OutboxSummary(ctx context.Context, bot types.UID, after int64) (OutboxSummary, error)
	// OutboxStats describes the backlog at now.
	OutboxStats(ctx context.Context, now time.Time) (OutboxStats, error)
}
