package postgres

import (
	"testing"
	"time"

	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/storetest"
)

var t0 = storetest.T0

func TestBufferCoalescesByKey(t *testing.T) {
	b := newBuffer(10)
	b.beat(storetest.Beat("a", t0.Add(time.Minute)))
	b.beat(storetest.Beat("a", t0)) // older, late: the later time stays
	b.beat(storetest.Beat("b", t0))
	for i := range 5 {
		b.upsertSlot(storetest.Slot("ns", "s1").Phase([]string{"Idle", "Deploying", "Busy", "Releasing", "Idle"}[i]).Record())
	}
	b.upsertBot(storetest.Bot("c").Record())
	b.deleteBot("c")

	if got := b.len(); got != 4 { // beats a and b, slot s1, bot c
		t.Fatalf("len = %d, want 4", got)
	}
	if got := b.beats["a"].hb.At; !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("coalesced beat at %v, want the latest", got)
	}
	snap := b.snapshot(10)
	if len(snap.ops) != 2 || snap.ops[0].kind != opUpsertSlot || snap.ops[0].slot.Phase != "Idle" || snap.ops[1].kind != opDeleteBot {
		t.Fatalf("ops = %+v, want the last slot write then the delete of c", snap.ops)
	}
}

func TestBufferDeleteBotForgetsItsBeat(t *testing.T) {
	b := newBuffer(10)
	b.beat(storetest.Beat("a", t0))
	b.deleteBot("a")
	if _, ok := b.beats["a"]; ok {
		t.Fatal("a beat older than the delete would recreate the bot after it")
	}
	b.beat(storetest.Beat("a", t0.Add(time.Second))) // a newer beat recreates it, after the delete
	if _, ok := b.beats["a"]; !ok || b.len() != 2 {
		t.Fatalf("beats = %v, len %d", b.beats, b.len())
	}
}

func TestBufferDropsOldestRows(t *testing.T) {
	b := newBuffer(3)
	dropped := 0
	for i := range 10 {
		tr := storetest.Transition("ns", "s1", "Idle", "Busy", t0.Add(time.Duration(i)*time.Second))
		dropped += b.appendRows(row{transition: &tr})
	}
	if dropped != 7 || b.dropped != 7 || len(b.rows) != 3 {
		t.Fatalf("dropped %d (counter %d), kept %d; want 7 dropped, 3 kept", dropped, b.dropped, len(b.rows))
	}
	if got := b.rows[0].transition.At; !got.Equal(t0.Add(7 * time.Second)) {
		t.Fatalf("oldest kept row at %v, want the 8th", got)
	}
}

// TestBufferAckKeepsNewerWrites checks the replay protocol: a write that lands while its key's
// older value is being replayed survives the acknowledgement, and is replayed next.
func TestBufferAckKeepsNewerWrites(t *testing.T) {
	b := newBuffer(10)
	b.upsertSlot(storetest.Slot("ns", "s1").Phase("Busy").Record())
	b.beat(storetest.Beat("a", t0))
	tr := storetest.Transition("ns", "s1", "Idle", "Busy", t0)
	b.appendRows(row{transition: &tr}, row{transition: &tr})
	snap := b.snapshot(1)

	b.upsertSlot(storetest.Slot("ns", "s1").Phase("Releasing").Record()) // during the replay
	b.beat(storetest.Beat("a", t0.Add(time.Second)))

	b.ackOp(snap.ops[0])
	b.ackBeats(snap.beats, snap.seqs)
	b.ackRows(snap.rows[len(snap.rows)-1].seq)
	if b.len() != 3 {
		t.Fatalf("len after ack = %d, want 3 (newer slot, newer beat, second row)", b.len())
	}
	if op := b.slots[slotKey{"ns", "s1"}]; op.slot.Phase != "Releasing" {
		t.Fatalf("slot after ack = %+v", op.slot)
	}
}

func TestBufferGivesUpRefusedWrites(t *testing.T) {
	b := newBuffer(10)
	b.upsertSlot(storetest.Slot("ns", "s1").App("app-1").Record())
	op := b.snapshot(0).ops[0]
	for i := 1; i < maxReplayFailures; i++ {
		if b.failOp(op, maxReplayFailures) {
			t.Fatalf("given up after %d failures", i)
		}
	}
	if !b.failOp(op, maxReplayFailures) || b.len() != 0 || b.dropped != 1 {
		t.Fatalf("not given up after %d failures (len %d, dropped %d)", maxReplayFailures, b.len(), b.dropped)
	}
}

func TestMergeBeat(t *testing.T) {
	cases := []struct {
		name     string
		old, new store.Heartbeat
		want     store.Heartbeat
	}{
		{"newer wins", storetest.Beat("a", t0), storetest.Beat("a", t0.Add(1)), storetest.Beat("a", t0.Add(1))},
		{"older loses", storetest.Beat("a", t0.Add(1)), storetest.Beat("a", t0), storetest.Beat("a", t0.Add(1))},
		{"first name kept", store.Heartbeat{BotUID: "a", Name: "x", At: t0}, store.Heartbeat{BotUID: "a", Name: "y", At: t0}, store.Heartbeat{BotUID: "a", Name: "x", At: t0}},
		{"name filled", store.Heartbeat{BotUID: "a", At: t0}, store.Heartbeat{BotUID: "a", Namespace: "ns", Name: "y", At: t0}, store.Heartbeat{BotUID: "a", Namespace: "ns", Name: "y", At: t0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := mergeBeat(c.old, c.new); got != c.want {
				t.Fatalf("mergeBeat = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestBufferCoalescesAsksAndDeleteSlotForgetsThem(t *testing.T) {
	b := newBuffer(10)
	b.ask(storetest.Ask("a", "ns", "bpt_new", t0.Add(time.Minute)))
	b.ask(storetest.Ask("a", "ns", "bpt_old", t0)) // older, late: the later ask stays
	b.ask(storetest.Ask("b", "ns", "bpt_b", t0))
	if got := b.asks["a"].ask; got.TokenSHA256 != storetest.Ask("a", "ns", "bpt_new", t0).TokenSHA256 || b.len() != 2 {
		t.Fatalf("asks = %+v (len %d), want a's latest and b's", b.asks, b.len())
	}
	b.deleteSlot("ns", "slot-a")
	if _, ok := b.asks["a"]; ok {
		t.Fatal("an ask older than the slot's delete would outlive it")
	}
	b.ask(storetest.Ask("a2", "ns", "bpt_a2", t0.Add(time.Hour))) // a new slot of the name, after the delete
	snap := b.snapshot(10)
	if len(snap.asks) != 2 || len(snap.aseqs) != 2 {
		t.Fatalf("snapshot asks = %+v, want b's and a2's", snap.asks)
	}
	b.ackAsks(snap.asks, snap.aseqs)
	if len(b.asks) != 0 {
		t.Fatalf("asks after the ack = %+v", b.asks)
	}
}

func TestBufferKeepsTheLatestHangUpOfASlot(t *testing.T) {
	b := newBuffer(10)
	b.left(storetest.Left("a", "bpt_a", t0, t0.Add(2*time.Second)))
	b.left(storetest.Left("a", "bpt_a", t0, t0.Add(time.Second))) // older, late: the later stays
	b.left(storetest.Left("b", "bpt_b", t0, t0))
	if got := b.lefts["a"].left; !got.At.Equal(t0.Add(2*time.Second)) || b.len() != 2 {
		t.Fatalf("lefts = %+v (len %d), want a's latest and b's", b.lefts, b.len())
	}
	snap := b.snapshot(10)
	b.left(storetest.Left("b", "bpt_b", t0, t0.Add(time.Second))) // changed during the replay
	b.ackLefts(snap.lefts, snap.lseqs)
	if _, ok := b.lefts["b"]; len(b.lefts) != 1 || !ok {
		t.Fatalf("lefts after the ack = %+v, want b's newer one only", b.lefts)
	}
}
