package store

import (
	"context"
	"encoding/json"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

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
	// State is OutboxDelivered, OutboxFailed, or OutboxPending to try again at NextAttemptAt.
	State         OutboxState
	NextAttemptAt time.Time
	Error         string
}

// OutboxSummary is what became of one bot's messages, for its status.webhook.
type OutboxSummary struct {
	Pending, Delivered, Failed int
	// DeliveredPhase is the phase of the delivered message with the highest Seq.
	DeliveredPhase string
	// LastError is the error of the latest failed attempt of any message, "" when none failed.
	LastError string
}

// OutboxStats describe the backlog, for metrics.
type OutboxStats struct {
	// Pending counts the messages not delivered nor given up.
	Pending int
	// OldestDue is the NextAttemptAt of the longest-waiting due message; zero when none is due.
	OldestDue time.Time
}

// Outbox keeps webhook messages until they are delivered or given up. The bot controller adds
// them; the webhook dispatcher (leader only) claims the due ones, sends them and records each
// attempt. Postgres keeps them across restarts and leader changes; the memory store loses them
// on restart. Times are passed in (the caller's injected clock), kept to the microsecond.
type Outbox interface {
	// AddMessage stores m as pending, due at once; nothing changes when its ID exists.
	AddMessage(ctx context.Context, m OutboxMessage) error
	// ClaimMessages hands out up to limit due messages (pending, NextAttemptAt <= now, not
	// claimed by a live lease, the first pending one of their bot), counting the attempt and
	// leasing each until now+lease: a claimer that dies before FinishAttempt loses its claim
	// when the lease ends, and another claims the message again. Concurrent claimers never
	// get the same message while its lease runs.
	ClaimMessages(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]OutboxMessage, error)
	// FinishAttempt records the outcome of a claimed attempt and releases the claim.
	FinishAttempt(ctx context.Context, id string, o OutboxOutcome) error
	// OutboxSummary sums up one bot's messages.
	OutboxSummary(ctx context.Context, bot types.UID) (OutboxSummary, error)
	// OutboxStats describes the backlog at now.
	OutboxStats(ctx context.Context, now time.Time) (OutboxStats, error)
}
