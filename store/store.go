// Package store keeps what the operator knows outside the API server: bot liveness
// (heartbeats), a projection of Bots and BotPoolSlots into SQL tables for dashboards and as a
// second safety net for the binding (UNIQUE constraints), the audit log of slot transitions,
// and the events bots report. Two implementations share the Store interface: Postgres
// (store/postgres) and an in-memory one (store/memory), the embedded default.
//
// The operator must keep working while Postgres is down: writes are buffered with a bound and
// replayed when the server returns, and reads answer ErrUnavailable — "unknown", never
// "dead" — so no bot is ever failed for lack of data.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

var (
	// ErrUnavailable means the store cannot answer now (Postgres unreachable). Callers treat
	// the answer as unknown: they never conclude that a bot is dead from it.
	ErrUnavailable = errors.New("store unavailable")
	// ErrBuffered means a write was accepted into the bounded outage buffer but is not yet
	// durable; it will be written when the database returns.
	ErrBuffered = errors.New("write buffered until the store is available again")
	// ErrConflict means a write broke a uniqueness rule of the projection (a slot name, an
	// application uuid or a bot assigned twice): a bug upstream, surfaced, never swallowed.
	ErrConflict = errors.New("projection conflict")
)

// Accepted reports whether a write either succeeded or was buffered during an outage: the
// store owns it from here, so the caller carries on (a Postgres outage never fails a bot).
func Accepted(err error) bool {
	return err == nil || errors.Is(err, ErrBuffered)
}

// Store is the operator's view of its database. Every method is safe for concurrent use.
//
// Writes return nil once durable, ErrBuffered when the database is unreachable and the write
// waits in the outage buffer (see Accepted), ErrConflict for a uniqueness violation, or another
// error for an invalid record. Reads return ErrUnavailable during an outage. A zero time in a
// record means "now" by the store's clock. Times are kept to the microsecond.
type Store interface {
	// RecordHeartbeat upserts the liveness of one bot. Heartbeats of many bots are written
	// together (one statement per batch); the call returns once the batch holding this beat
	// is committed (nil), or ErrBuffered during an outage. A beat for a bot whose record was
	// removed recreates it.
	RecordHeartbeat(ctx context.Context, hb Heartbeat) error

	// LastHeartbeats returns the latest heartbeat time of each of the given bots that has one,
	// in one query. Bots never seen are absent from the map. During an outage it returns
	// ErrUnavailable.
	LastHeartbeats(ctx context.Context, bots []types.UID) (map[types.UID]time.Time, error)

	// UpsertBot writes the projection of one Bot.
	UpsertBot(ctx context.Context, bot BotRecord) error
	// DeleteBot removes a Bot's projection and liveness.
	DeleteBot(ctx context.Context, uid types.UID) error

	// UpsertSlot writes the projection of one BotPoolSlot; ErrConflict when another slot has
	// the same application uuid or the same assigned bot.
	UpsertSlot(ctx context.Context, slot SlotRecord) error
	// DeleteSlot removes a slot's projection, and the asks of its containers (RecordSlotAsk).
	// A slot's name is taken again only after its object is gone, and the projection goes
	// when the object does, so the asks under that name are the old slot's; were an ask of a
	// new slot of that name caught by a late delete, its container's next ask records it
	// again (a waiting container asks at least once a long-poll).
	DeleteSlot(ctx context.Context, namespace, name string) error

	// RecordSlotAsk upserts the latest request for work of a slot's container (a config call),
	// keyed by slot uid. Like a heartbeat it is liveness: only the latest ask of each slot is
	// kept, and an older ask arriving late never replaces a newer one. During an outage it is
	// buffered (coalesced per slot, ErrBuffered) and written when the database returns. Asks
	// are kept in one clock for every replica, as heartbeats are. DeleteSlot removes the asks
	// recorded under the slot's namespace and name.
	RecordSlotAsk(ctx context.Context, ask SlotAsk) error
	// RecordSlotLeft records that a slot's container hung up a wait for work (its connection
	// closed before the answer, as it does when the container dies): it sets LeftAt on the
	// slot's latest ask, only when that ask carries the same credential hash and is not newer
	// than left.Since, when the hung-up wait began. An ask after that (the container asked
	// again, on any replica) wins, and every later ask clears LeftAt. A left that does not
	// apply is no error. Buffered during an outage like an ask, and applied after the asks
	// buffered with it.
	RecordSlotLeft(ctx context.Context, left SlotLeft) error
	// LastSlotAsks returns the latest ask of each given slot that has one, in one query;
	// ErrUnavailable during an outage.
	LastSlotAsks(ctx context.Context, slots []types.UID) (map[types.UID]SlotAsk, error)

	// RecordTransition appends one slot transition to the audit log.
	RecordTransition(ctx context.Context, t Transition) error

	// AppendBotEvents appends events reported by a bot.
	AppendBotEvents(ctx context.Context, events []BotEvent) error

	// Status reports whether the database is reachable and how much waits in the buffer,
	// for a condition and metrics.
	Status() Status

	// Close flushes what it can and releases connections.
	Close() error
}

// Heartbeat is one proof of life from a bot container.
type Heartbeat struct {
	BotUID    types.UID
	Namespace string
	Name      string
	At        time.Time
}

// BotRecord is the projection of a Bot.
type BotRecord struct {
	UID             types.UID
	Namespace       string
	Name            string
	Platform        string
	Phase           string
	Pool            string
	SlotName        string
	ApplicationUUID string
	CreatedAt       time.Time
	FinishedAt      *time.Time
}

// SlotRecord is the projection of a BotPoolSlot.
type SlotRecord struct {
	Namespace       string
	Name            string
	Pool            string
	Phase           string
	ApplicationUUID string    // empty until the application exists
	BotUID          types.UID // empty when the slot is free
	BotName         string
	LastUsedAt      *time.Time
	UpdatedAt       time.Time
}

// SlotAsk is one request for work (GET /v1/slots/{uuid}/config) by a slot's container: the
// proof that the container runs and waits for a bot.
type SlotAsk struct {
	SlotUID   types.UID
	Namespace string
	Name      string
	// TokenSHA256 is the hex SHA-256 of the slot credential the container sent (as in the
	// slot's status.tokenSHA256): a reader tells the slot's current container, whose
	// credential the operator issued last, from an older one.
	TokenSHA256 string
	At          time.Time
	// LeftAt, when not zero, is when the container hung up a wait it began with this ask (or
	// after it) and has not asked since (RecordSlotLeft). RecordSlotAsk ignores it: an ask
	// always clears it.
	LeftAt time.Time
}

// Left reports whether a hang-up applies to this ask: the same credential, and the ask not
// newer than the hung-up wait (a container that asked again since is back).
func (a SlotAsk) Left(l SlotLeft) bool {
	return a.TokenSHA256 == l.TokenSHA256 && !a.At.After(l.Since)
}

// SlotLeft is a slot's container hanging up its wait for work (GET .../config?wait=) before
// the answer.
type SlotLeft struct {
	SlotUID types.UID
	// TokenSHA256 is the hex SHA-256 of the slot credential the hung-up request carried.
	TokenSHA256 string
	// Since is when the hung-up wait began (zero: At); an ask recorded after it is the
	// container's, or another's, asking again.
	Since time.Time
	// At is when the wait was hung up.
	At time.Time
}

// Transition is one change of a slot's phase, for the audit log.
type Transition struct {
	Namespace       string
	Slot            string
	Pool            string
	From            string
	To              string
	BotUID          types.UID
	BotName         string
	ApplicationUUID string
	Reason          string
	CorrelationID   string
	At              time.Time
}

// BotEvent is something a bot reported (a participant joined, a log line…).
type BotEvent struct {
	BotUID    types.UID
	Namespace string
	Name      string
	Type      string
	Data      json.RawMessage
	At        time.Time
}

// Status is the store's health.
type Status struct {
	// Available is false while the database cannot be reached.
	Available bool
	// Since is when Available last changed.
	Since time.Time
	// Buffered counts writes waiting for the database.
	Buffered int
	// Dropped counts buffered writes given up because the buffer was full (append-only rows
	// only: the latest heartbeat and projection of each object are always kept).
	Dropped int64
	// LastError is the last database error, for logs and conditions.
	LastError string
}
