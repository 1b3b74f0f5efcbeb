package postgres

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"botpool.dev/botpool/store"
)

// buffer holds the writes made while Postgres is unreachable, bounded without losing what
// matters. Heartbeats and projections are state: only the latest per key matters, so they
// coalesce (a heartbeat keeps the greatest time, a projection its last write, a delete
// supersedes both) and their size is bounded by the number of bots and slots. Transitions and
// events are history: they queue in order up to a limit, beyond which the oldest are dropped and
// counted.
//
// Every entry carries the sequence number of its last change. Replay writes entries in that
// order and acknowledges each by sequence, so a write that lands while the replay is running
// overrides the entry and is replayed again rather than lost. buffer is not safe for concurrent
// use; Store guards it with its mutex.
type buffer struct {
	rowLimit int
	seq      uint64
	dropped  int64

	bots  map[types.UID]*keyedOp
	slots map[slotKey]*keyedOp
	beats map[types.UID]beatEntry
	asks  map[types.UID]askEntry  // by slot uid
	lefts map[types.UID]leftEntry // by slot uid
	rows  []row                   // in sequence order
}

type slotKey struct{ namespace, name string }

type opKind uint8

const (
	opUpsertBot opKind = iota
	opDeleteBot
	opUpsertSlot
	opDeleteSlot
)

// keyedOp is the latest write of one bot's or slot's projection.
type keyedOp struct {
	kind     opKind
	seq      uint64
	bot      store.BotRecord  // opUpsertBot; opDeleteBot uses bot.UID
	slot     store.SlotRecord // opUpsertSlot; opDeleteSlot uses slot.Namespace and slot.Name
	failures int              // replays refused by the server (conflicts after coalescing…)
}

type beatEntry struct {
	hb  store.Heartbeat
	seq uint64
}

type askEntry struct {
	ask store.SlotAsk
	seq uint64
}

type leftEntry struct {
	left store.SlotLeft
	seq  uint64
}

// row is one append-only row: a transition or an event, with the id that makes its insert
// idempotent.
type row struct {
	seq        uint64
	id         [16]byte
	transition *store.Transition
	event      *store.BotEvent
}

func newBuffer(rowLimit int) *buffer {
	return &buffer{
		rowLimit: max(rowLimit, 1),
		bots:     map[types.UID]*keyedOp{},
		slots:    map[slotKey]*keyedOp{},
		beats:    map[types.UID]beatEntry{},
		asks:     map[types.UID]askEntry{},
		lefts:    map[types.UID]leftEntry{},
	}
}

func (b *buffer) next() uint64 { b.seq++; return b.seq }

// len counts the writes waiting.
func (b *buffer) len() int {
	return len(b.bots) + len(b.slots) + len(b.beats) + len(b.asks) + len(b.lefts) + len(b.rows)
}

func (b *buffer) upsertBot(rec store.BotRecord) {
	b.bots[rec.UID] = &keyedOp{kind: opUpsertBot, seq: b.next(), bot: rec}
}

// deleteBot also forgets the bot's pending heartbeat: DeleteBot removes liveness too, and a beat
// arriving after it is buffered anew, with a later sequence.
func (b *buffer) deleteBot(uid types.UID) {
	delete(b.beats, uid)
	b.bots[uid] = &keyedOp{kind: opDeleteBot, seq: b.next(), bot: store.BotRecord{UID: uid}}
}

func (b *buffer) upsertSlot(rec store.SlotRecord) {
	b.slots[slotKey{rec.Namespace, rec.Name}] = &keyedOp{kind: opUpsertSlot, seq: b.next(), slot: rec}
}

// deleteSlot also forgets the pending asks under the slot's name: DeleteSlot removes them too,
// and an ask arriving after it is buffered anew, with a later sequence.
func (b *buffer) deleteSlot(namespace, name string) {
	for uid, e := range b.asks {
		if e.ask.Namespace == namespace && e.ask.Name == name {
			delete(b.asks, uid)
		}
	}
	b.slots[slotKey{namespace, name}] = &keyedOp{kind: opDeleteSlot, seq: b.next(),
		slot: store.SlotRecord{Namespace: namespace, Name: name}}
}

// beat keeps the latest heartbeat of a bot, as GREATEST does in SQL.
func (b *buffer) beat(hb store.Heartbeat) {
	if old, ok := b.beats[hb.BotUID]; ok {
		hb = mergeBeat(old.hb, hb)
	}
	b.beats[hb.BotUID] = beatEntry{hb: hb, seq: b.next()}
}

// ask keeps the latest ask of a slot, as the SQL upsert does.
func (b *buffer) ask(a store.SlotAsk) {
	if old, ok := b.asks[a.SlotUID]; ok && old.ask.At.After(a.At) {
		a = old.ask
	}
	b.asks[a.SlotUID] = askEntry{ask: a, seq: b.next()}
}

// left keeps the latest hang-up of a slot. It is replayed after the asks, whose upsert decides
// whether it still applies (an ask after the hung-up wait wins), so a buffered ask needs no
// change here. A slot's lefts are not forgotten with its deletion: the slot's row is gone, and
// the replayed left finds nothing to mark.
func (b *buffer) left(l store.SlotLeft) {
	if old, ok := b.lefts[l.SlotUID]; ok && old.left.At.After(l.At) {
		l = old.left
	}
	b.lefts[l.SlotUID] = leftEntry{left: l, seq: b.next()}
}

// mergeBeat keeps the later time and the first name known, like the SQL upsert.
func mergeBeat(old, hb store.Heartbeat) store.Heartbeat {
	if old.At.After(hb.At) {
		hb.At = old.At
	}
	if old.Namespace != "" {
		hb.Namespace = old.Namespace
	}
	if old.Name != "" {
		hb.Name = old.Name
	}
	return hb
}

// appendRows queues rows, dropping the oldest beyond the limit; it returns how many it dropped.
func (b *buffer) appendRows(rows ...row) int {
	for i := range rows {
		rows[i].seq = b.next()
	}
	b.rows = append(b.rows, rows...)
	over := len(b.rows) - b.rowLimit
	if over <= 0 {
		return 0
	}
	b.rows = b.rows[over:]
	if cap(b.rows) > 2*b.rowLimit {
		// Reslicing keeps the dropped rows reachable; copy now and then to let them go.
		b.rows = append(make([]row, 0, b.rowLimit), b.rows...)
	}
	b.dropped += int64(over)
	return over
}

// snapshot is a copy of the buffer's contents for one replay pass.
type snapshot struct {
	ops   []keyedOp // in sequence order
	beats []store.Heartbeat
	seqs  []uint64 // beats[i] has sequence seqs[i]
	asks  []store.SlotAsk
	aseqs []uint64 // asks[i] has sequence aseqs[i]
	lefts []store.SlotLeft
	lseqs []uint64 // lefts[i] has sequence lseqs[i]
	rows  []row
}

// snapshot copies what is waiting; at most maxRows append-only rows, the oldest.
func (b *buffer) snapshot(maxRows int) snapshot {
	var s snapshot
	for _, op := range b.bots {
		s.ops = append(s.ops, *op)
	}
	for _, op := range b.slots {
		s.ops = append(s.ops, *op)
	}
	slices.SortFunc(s.ops, func(x, y keyedOp) int { return compareSeq(x.seq, y.seq) })
	for _, e := range b.beats {
		s.beats = append(s.beats, e.hb)
		s.seqs = append(s.seqs, e.seq)
	}
	for _, e := range b.asks {
		s.asks = append(s.asks, e.ask)
		s.aseqs = append(s.aseqs, e.seq)
	}
	for _, e := range b.lefts {
		s.lefts = append(s.lefts, e.left)
		s.lseqs = append(s.lseqs, e.seq)
	}
	s.rows = slices.Clone(b.rows[:min(len(b.rows), maxRows)])
	return s
}

func compareSeq(x, y uint64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// find returns the live entry an op of a snapshot came from, nil when it changed since.
func (b *buffer) find(op keyedOp) *keyedOp {
	var cur *keyedOp
	switch op.kind {
	case opUpsertBot, opDeleteBot:
		cur = b.bots[op.bot.UID]
	default:
		cur = b.slots[slotKey{op.slot.Namespace, op.slot.Name}]
	}
	if cur == nil || cur.seq != op.seq {
		return nil
	}
	return cur
}

// ackOp removes an op once written, unless it was overwritten meanwhile.
func (b *buffer) ackOp(op keyedOp) {
	if b.find(op) == nil {
		return
	}
	if op.kind == opUpsertBot || op.kind == opDeleteBot {
		delete(b.bots, op.bot.UID)
	} else {
		delete(b.slots, slotKey{op.slot.Namespace, op.slot.Name})
	}
}

// failOp counts a refused replay of op and gives it up after maxFailures: a write the server
// keeps refusing must not block the recovery forever. It reports whether op was given up.
func (b *buffer) failOp(op keyedOp, maxFailures int) bool {
	cur := b.find(op)
	if cur == nil {
		return false
	}
	cur.failures++
	if cur.failures < maxFailures {
		return false
	}
	b.ackOp(op)
	b.dropped++
	return true
}

// ackBeats removes the written heartbeats that did not change meanwhile.
func (b *buffer) ackBeats(beats []store.Heartbeat, seqs []uint64) {
	for i, hb := range beats {
		if e, ok := b.beats[hb.BotUID]; ok && e.seq == seqs[i] {
			delete(b.beats, hb.BotUID)
		}
	}
}

// ackAsks removes the written asks that did not change meanwhile.
func (b *buffer) ackAsks(asks []store.SlotAsk, seqs []uint64) {
	for i, a := range asks {
		if e, ok := b.asks[a.SlotUID]; ok && e.seq == seqs[i] {
			delete(b.asks, a.SlotUID)
		}
	}
}

// ackLefts removes the written hang-ups that did not change meanwhile.
func (b *buffer) ackLefts(lefts []store.SlotLeft, seqs []uint64) {
	for i, l := range lefts {
		if e, ok := b.lefts[l.SlotUID]; ok && e.seq == seqs[i] {
			delete(b.lefts, l.SlotUID)
		}
	}
}

// ackRows removes the rows up to sequence last (some may have been dropped meanwhile).
func (b *buffer) ackRows(last uint64) {
	n := 0
	for n < len(b.rows) && b.rows[n].seq <= last {
		n++
	}
	b.rows = b.rows[n:]
	if len(b.rows) == 0 {
		b.rows = nil
	}
}
