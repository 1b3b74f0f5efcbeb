package storetest

import (
	"encoding/json"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"botpool.dev/botpool/store"
)

// T0 is the suite's reference time: whole seconds, so it survives the microsecond precision of
// both stores unchanged.
var T0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// SlotBuilder builds a store.SlotRecord fluently.
type SlotBuilder struct{ rec store.SlotRecord }

// Slot starts a free, idle slot record in pool "pool-a".
func Slot(namespace, name string) *SlotBuilder {
	return &SlotBuilder{rec: store.SlotRecord{Namespace: namespace, Name: name, Pool: "pool-a", Phase: "Idle", UpdatedAt: T0}}
}

// App sets the application uuid.
func (b *SlotBuilder) App(uuid string) *SlotBuilder { b.rec.ApplicationUUID = uuid; return b }

// BoundTo assigns a bot and makes the slot Busy.
func (b *SlotBuilder) BoundTo(uid types.UID, name string) *SlotBuilder {
	b.rec.BotUID, b.rec.BotName, b.rec.Phase = uid, name, "Busy"
	return b
}

// Phase sets the phase.
func (b *SlotBuilder) Phase(p string) *SlotBuilder { b.rec.Phase = p; return b }

// LastUsed sets lastUsedAt.
func (b *SlotBuilder) LastUsed(t time.Time) *SlotBuilder { b.rec.LastUsedAt = &t; return b }

// Record returns the record.
func (b *SlotBuilder) Record() store.SlotRecord { return b.rec }

// BotBuilder builds a store.BotRecord fluently.
type BotBuilder struct{ rec store.BotRecord }

// Bot starts a Pending google-meet bot record created at T0.
func Bot(uid types.UID) *BotBuilder {
	return &BotBuilder{rec: store.BotRecord{
		UID: uid, Namespace: "default", Name: "bot-" + string(uid), Platform: "google-meet",
		Phase: "Pending", Pool: "pool-a", CreatedAt: T0,
	}}
}

// Phase sets the phase.
func (b *BotBuilder) Phase(p string) *BotBuilder { b.rec.Phase = p; return b }

// InSlot sets the slot and application uuid.
func (b *BotBuilder) InSlot(slot, app string) *BotBuilder {
	b.rec.SlotName, b.rec.ApplicationUUID = slot, app
	return b
}

// Finished marks the bot finished at t.
func (b *BotBuilder) Finished(t time.Time) *BotBuilder { b.rec.FinishedAt = &t; return b }

// Record returns the record.
func (b *BotBuilder) Record() store.BotRecord { return b.rec }

// Beat returns a heartbeat of bot uid at t.
func Beat(uid types.UID, t time.Time) store.Heartbeat {
	return store.Heartbeat{BotUID: uid, Namespace: "default", Name: "bot-" + string(uid), At: t}
}

// Transition returns a transition of a slot.
func Transition(namespace, slot, from, to string, at time.Time) store.Transition {
	return store.Transition{
		Namespace: namespace, Slot: slot, Pool: "pool-a", From: from, To: to,
		Reason: from + "To" + to, CorrelationID: "corr-" + slot, At: at,
	}
}

// Event returns a bot event with a JSON payload.
func Event(uid types.UID, typ string, data any, at time.Time) store.BotEvent {
	raw, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	return store.BotEvent{BotUID: uid, Namespace: "default", Name: "bot-" + string(uid), Type: typ, Data: raw, At: at}
}
