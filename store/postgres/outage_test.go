package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/postgres"
	"botpool.dev/botpool/store/storetest"
)

// stopServer stops the package's Postgres and returns the function that brings it back; the
// server is resumed when the test ends in any case, so one failure does not cascade.
func stopServer(t *testing.T) (resume func()) {
	t.Helper()
	if err := server.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := server.Resume(ctx); err != nil {
				t.Errorf("resuming Postgres: %v", err)
			}
		})
	}
	t.Cleanup(resume)
	return resume
}

func waitAvailable(t *testing.T, s *postgres.Store, want bool) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("Status().Available = %v", want), func() bool { return s.Status().Available == want })
}

// ledger records what the concurrent writers were told, to check the database against it.
type ledger struct {
	mu          sync.Mutex
	acked       int                     // calls that returned nil
	buffered    int                     // calls that returned ErrBuffered
	beats       map[types.UID]time.Time // latest accepted (acked or buffered) beat per bot
	transitions map[string]bool         // correlation ids of accepted transitions
	slotPhase   map[string]string       // latest accepted phase per slot
	failures    []error
}

func (l *ledger) record(err error, accept func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.acked++
	case errors.Is(err, store.ErrBuffered):
		l.buffered++
	default:
		l.failures = append(l.failures, err)
		return
	}
	accept()
}

// TestRestartLosesNothingAccepted disrupts Postgres under concurrent writers: no caller fails,
// and afterwards every write that returned nil or ErrBuffered is in the database exactly once.
func TestRestartLosesNothingAccepted(t *testing.T) {
	cases := []struct {
		name    string
		disrupt func(t *testing.T, s *postgres.Store, reg *prometheus.Registry, l *ledger)
	}{
		{"stop, write, resume", stopWriteResume},
		{"quick restart", func(t *testing.T, _ *postgres.Store, _ *prometheus.Registry, _ *ledger) {
			// Too quick for writers to notice, maybe: the pool's dead connections must not
			// turn into failures either way.
			if err := server.Restart(t.Context()); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			s, dsn := newStore(t, fastOptions(reg)...)
			l := &ledger{beats: map[types.UID]time.Time{}, transitions: map[string]bool{}, slotPhase: map[string]string{}}
			stop := startWriters(s, l)
			waitWrites(t, l, 50, 0)
			c.disrupt(t, s, reg, l)
			waitAvailable(t, s, true)
			waitWrites(t, l, l.snapshot().acked+50, 0) // and they carry on
			stop()
			if up, _ := metric(t, reg, "botpool_store_up"); up != 1 {
				t.Errorf("botpool_store_up = %v after recovery", up)
			}
			replayed, _ := metric(t, reg, "botpool_store_replayed_total")
			t.Logf("acknowledged %d, buffered %d, replayed %v, status %+v", l.acked, l.buffered, replayed, s.Status())
			if len(l.failures) > 0 {
				t.Fatalf("%d writes failed, first: %v", len(l.failures), l.failures[0])
			}
			checkLedger(t, s, dsn, l)
		})
	}
}

// stopWriteResume keeps Postgres down until writes have been buffered, checking on the way
// that reads answer "unknown" and the status and metrics show the outage.
func stopWriteResume(t *testing.T, s *postgres.Store, reg *prometheus.Registry, l *ledger) {
	resume := stopServer(t)
	waitAvailable(t, s, false)
	if _, err := s.LastHeartbeats(t.Context(), []types.UID{"bot-0-0"}); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("LastHeartbeats during the outage: err = %v, want ErrUnavailable", err)
	}
	if up, _ := metric(t, reg, "botpool_store_up"); up != 0 {
		t.Errorf("botpool_store_up = %v during the outage", up)
	}
	waitWrites(t, l, 0, 50)
	if st := s.Status(); st.Buffered == 0 || st.LastError == "" {
		t.Errorf("status during the outage = %+v, want buffered writes and the last error", st)
	}
	resume()
}

// startWriters starts concurrent heartbeat, transition and slot writers, recording their
// answers in l; the returned function stops them and waits.
func startWriters(s *postgres.Store, l *ledger) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	writer := func(write func(i int)) {
		wg.Go(func() {
			tick := time.NewTicker(2 * time.Millisecond) // a steady rate, not a busy loop
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				case <-tick.C:
				}
				write(i)
			}
		})
	}
	ctx := context.Background()
	for w := range 6 {
		writer(func(i int) {
			uid := types.UID(fmt.Sprintf("bot-%d-%d", w, i%4))
			at := storetest.T0.Add(time.Duration(i) * time.Millisecond)
			err := s.RecordHeartbeat(ctx, storetest.Beat(uid, at))
			l.record(err, func() {
				if at.After(l.beats[uid]) {
					l.beats[uid] = at
				}
			})
		})
	}
	for w := range 2 {
		writer(func(i int) {
			tr := storetest.Transition("ns", fmt.Sprintf("s%d", w), "Idle", "Busy", time.Time{})
			tr.CorrelationID = fmt.Sprintf("w%d-%d", w, i)
			err := s.RecordTransition(ctx, tr)
			l.record(err, func() { l.transitions[tr.CorrelationID] = true })
		})
		writer(func(i int) {
			name, phase := fmt.Sprintf("s%d", w), fmt.Sprintf("p%d", i)
			err := s.UpsertSlot(ctx, storetest.Slot("ns", name).App("app-"+name).Phase(phase).Record())
			l.record(err, func() { l.slotPhase[name] = phase })
		})
	}
	return func() { close(done); wg.Wait() }
}

func (l *ledger) snapshot() (counts struct{ acked, buffered int }) {
	l.mu.Lock()
	defer l.mu.Unlock()
	counts.acked, counts.buffered = l.acked, l.buffered
	return counts
}

func waitWrites(t *testing.T, l *ledger, acked, buffered int) {
	t.Helper()
	eventually(t, 20*time.Second, fmt.Sprintf("%d acknowledged and %d buffered writes", acked, buffered), func() bool {
		c := l.snapshot()
		return c.acked >= acked && c.buffered >= buffered
	})
}

func checkLedger(t *testing.T, s *postgres.Store, dsn string, l *ledger) {
	t.Helper()
	ctx := t.Context()
	uids := make([]types.UID, 0, len(l.beats))
	for uid := range l.beats {
		uids = append(uids, uid)
	}
	got, err := s.LastHeartbeats(ctx, uids)
	if err != nil {
		t.Fatal(err)
	}
	for uid, want := range l.beats {
		if !got[uid].Equal(want) {
			t.Errorf("last heartbeat of %s = %v, want %v", uid, got[uid], want)
		}
	}
	c := sqlConn(t, dsn)
	rows, err := c.Query(ctx, `SELECT correlation_id, count(*) FROM slot_transitions GROUP BY correlation_id`)
	if err != nil {
		t.Fatal(err)
	}
	inDB := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		inDB[id] = n
	}
	for id := range l.transitions {
		if inDB[id] != 1 {
			t.Errorf("transition %s written %d times, want once", id, inDB[id])
		}
	}
	for name, phase := range l.slotPhase {
		rec, ok, err := s.Slot(ctx, "ns", name)
		if err != nil || !ok || rec.Phase != phase {
			t.Errorf("slot %s = %+v (ok %v, err %v), want phase %s", name, rec, ok, err, phase)
		}
	}
}

// TestReplayKeepsOrder buffers writes whose order matters and checks the state after recovery:
// a delete and a later recreation, a bot moving between slots (which coalescing turns into a
// transient conflict the replay must retry, not drop), a deleted bot's older beat.
func TestReplayKeepsOrder(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, _ := newStore(t, fastOptions(reg)...)
	ctx := t.Context()
	for _, rec := range []store.SlotRecord{
		storetest.Slot("ns", "a").App("app-a").Record(),
		storetest.Slot("ns", "b").App("app-b").BoundTo("bot-1", "one").Record(),
		storetest.Slot("ns", "c").App("app-c").Record(),
	} {
		if err := s.UpsertSlot(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}

	resume := stopServer(t)
	writes := []func() error{
		func() error { return s.UpsertSlot(ctx, storetest.Slot("ns", "b").App("app-b").Record()) },
		func() error {
			return s.UpsertSlot(ctx, storetest.Slot("ns", "a").App("app-a").BoundTo("bot-1", "one").Record())
		},
		func() error {
			return s.UpsertSlot(ctx, storetest.Slot("ns", "b").App("app-b").BoundTo("bot-2", "two").Record())
		},
		func() error { return s.DeleteSlot(ctx, "ns", "c") },
		func() error { return s.UpsertSlot(ctx, storetest.Slot("ns", "d").App("app-c").Record()) }, // c's app, freed
		func() error { return s.UpsertBot(ctx, storetest.Bot("x").Record()) },
		func() error { return s.DeleteBot(ctx, "x") },
		func() error { return s.RecordHeartbeat(ctx, storetest.Beat("y", storetest.T0)) },
		func() error { return s.DeleteBot(ctx, "y") },
		func() error { return s.RecordHeartbeat(ctx, storetest.Beat("y", storetest.T0.Add(time.Minute))) },
		func() error {
			return s.AppendBotEvents(ctx, []store.BotEvent{storetest.Event("y", "log", "back", storetest.T0)})
		},
		func() error { return s.RecordSlotAsk(ctx, storetest.Ask("z", "ns", "bpt_gone", storetest.T0)) },
		func() error { return s.DeleteSlot(ctx, "ns", "slot-z") },
		func() error { return s.RecordSlotAsk(ctx, storetest.Ask("w", "ns", "bpt_w", storetest.T0)) },
		func() error {
			return s.RecordSlotAsk(ctx, storetest.Ask("w", "ns", "bpt_w2", storetest.T0.Add(time.Second)))
		},
	}
	for i, w := range writes {
		if err := w(); !errors.Is(err, store.ErrBuffered) {
			t.Fatalf("write %d during the outage: err = %v, want ErrBuffered", i, err)
		}
	}
	resume()
	waitAvailable(t, s, true)

	want := map[string]store.SlotRecord{
		"a": storetest.Slot("ns", "a").App("app-a").BoundTo("bot-1", "one").Record(),
		"b": storetest.Slot("ns", "b").App("app-b").BoundTo("bot-2", "two").Record(),
		"d": storetest.Slot("ns", "d").App("app-c").Record(),
	}
	for name, w := range want {
		got, ok, err := s.Slot(ctx, "ns", name)
		if err != nil || !ok || got.BotUID != w.BotUID || got.ApplicationUUID != w.ApplicationUUID {
			t.Errorf("slot %s = %+v (ok %v, err %v), want bot %q app %q", name, got, ok, err, w.BotUID, w.ApplicationUUID)
		}
	}
	if _, ok, _ := s.Slot(ctx, "ns", "c"); ok {
		t.Error("slot c deleted during the outage is back")
	}
	if _, ok, _ := s.Bot(ctx, "x"); ok {
		t.Error("bot x deleted during the outage is back")
	}
	beats, err := s.LastHeartbeats(ctx, []types.UID{"y"})
	if err != nil || !beats["y"].Equal(storetest.T0.Add(time.Minute)) {
		t.Errorf("bot y's heartbeat = %v (err %v), want its beat after the delete", beats["y"], err)
	}
	if events, err := s.BotEvents(ctx, "y"); err != nil || len(events) != 1 {
		t.Errorf("bot y's events = %v (err %v), want 1", events, err)
	}
	asks, err := s.LastSlotAsks(ctx, []types.UID{"z", "w"})
	if want := storetest.Ask("w", "ns", "bpt_w2", storetest.T0.Add(time.Second)); err != nil || len(asks) != 1 || asks["w"].TokenSHA256 != want.TokenSHA256 || !asks["w"].At.Equal(want.At) {
		t.Errorf("asks after the outage = %+v (err %v), want only w's latest %+v (z's went with its slot)", asks, err, want)
	}
	if st := s.Status(); st.Dropped != 0 || st.Buffered != 0 {
		t.Errorf("status after recovery = %+v, want nothing dropped or left", st)
	}
	// Slot a took bot-1 before b let it go in the replay's order: refused once, then retried.
	if n, _ := metric(t, reg, "botpool_store_errors_total", "kind", "conflict"); n != 1 {
		t.Errorf("%v conflicts during the replay, want the 1 that coalescing caused", n)
	}
}

// TestReplayAppliesHangUpsAfterAsks: hang-ups buffered during an outage are replayed after
// the asks, so each is judged against the ask the container made before or after it, as on the
// direct path.
func TestReplayAppliesHangUpsAfterAsks(t *testing.T) {
	s, _ := newStore(t, fastOptions(prometheus.NewRegistry())...)
	ctx := t.Context()
	for _, uid := range []types.UID{"p", "q"} {
		if err := s.RecordSlotAsk(ctx, storetest.Ask(uid, "ns", "bpt_"+string(uid), storetest.T0)); err != nil {
			t.Fatal(err)
		}
	}
	resume := stopServer(t)
	t0 := storetest.T0
	for i, w := range []func() error{
		// p's container hangs up, then asks again: it is back.
		func() error { return s.RecordSlotLeft(ctx, storetest.Left("p", "bpt_p", t0, t0.Add(10*time.Second))) },
		func() error { return s.RecordSlotAsk(ctx, storetest.Ask("p", "ns", "bpt_p", t0.Add(11*time.Second))) },
		// q's container asks, then hangs up the wait it began with that ask: it left (replayed
		// before the ask, the hang-up would be cleared by it).
		func() error { return s.RecordSlotAsk(ctx, storetest.Ask("q", "ns", "bpt_q", t0.Add(5*time.Second))) },
		func() error {
			return s.RecordSlotLeft(ctx, storetest.Left("q", "bpt_q", t0.Add(5*time.Second), t0.Add(10*time.Second)))
		},
	} {
		if err := w(); !errors.Is(err, store.ErrBuffered) {
			t.Fatalf("write %d during the outage: err = %v, want ErrBuffered", i, err)
		}
	}
	resume()
	waitAvailable(t, s, true)
	asks, err := s.LastSlotAsks(ctx, []types.UID{"p", "q"})
	if err != nil {
		t.Fatal(err)
	}
	if p := asks["p"]; !p.At.Equal(t0.Add(11*time.Second)) || !p.LeftAt.IsZero() {
		t.Errorf("p's ask after the outage = %+v, want its ask again, not left", p)
	}
	if q := asks["q"]; !q.At.Equal(t0.Add(5*time.Second)) || !q.LeftAt.Equal(t0.Add(10*time.Second)) {
		t.Errorf("q's ask after the outage = %+v, want its ask, left at %s", q, t0.Add(10*time.Second))
	}
	if st := s.Status(); st.Buffered != 0 {
		t.Errorf("status after recovery = %+v, want nothing left", st)
	}
}

// TestBoundedBuffer fills the buffer during an outage: the oldest transitions are dropped and
// counted, the latest heartbeat and projection of every key are kept.
func TestBoundedBuffer(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, dsn := newStore(t, append(fastOptions(reg), postgres.WithBufferLimit(5))...)
	ctx := t.Context()
	resume := stopServer(t)

	for i := range 20 {
		tr := storetest.Transition("ns", "s1", "Idle", "Busy", storetest.T0.Add(time.Duration(i)*time.Second))
		tr.CorrelationID = fmt.Sprint(i)
		if err := s.RecordTransition(ctx, tr); !errors.Is(err, store.ErrBuffered) {
			t.Fatalf("transition %d: err = %v, want ErrBuffered", i, err)
		}
	}
	for i := range 100 {
		uid := types.UID(fmt.Sprint("bot-", i%3))
		if err := s.RecordHeartbeat(ctx, storetest.Beat(uid, storetest.T0.Add(time.Duration(i)*time.Second))); !errors.Is(err, store.ErrBuffered) {
			t.Fatalf("beat %d: err = %v, want ErrBuffered", i, err)
		}
		if err := s.UpsertSlot(ctx, storetest.Slot("ns", "s1").Phase(fmt.Sprint("p", i)).Record()); !errors.Is(err, store.ErrBuffered) {
			t.Fatalf("slot write %d: err = %v, want ErrBuffered", i, err)
		}
	}
	st := s.Status()
	if st.Available || st.Buffered != 5+3+1 || st.Dropped != 15 {
		t.Fatalf("status = %+v, want unavailable, 9 buffered (5 rows, 3 beats, 1 slot), 15 dropped", st)
	}
	for name, want := range map[string]float64{"botpool_store_buffered": 9, "botpool_store_dropped_total": 15, "botpool_store_up": 0} {
		if got, _ := metric(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}

	resume()
	waitAvailable(t, s, true)
	c := sqlConn(t, dsn)
	if n := queryInt(t, c, `SELECT count(*) FROM slot_transitions WHERE correlation_id::int >= 15`); n != 5 {
		t.Errorf("%d of the 5 newest transitions written", n)
	}
	if n := queryInt(t, c, `SELECT count(*) FROM slot_transitions`); n != 5 {
		t.Errorf("%d transitions written, want the 5 newest", n)
	}
	beats, err := s.LastHeartbeats(ctx, []types.UID{"bot-0", "bot-1", "bot-2"})
	if err != nil {
		t.Fatal(err)
	}
	for i, uid := range []types.UID{"bot-0", "bot-1", "bot-2"} {
		if want := storetest.T0.Add(time.Duration([]int{99, 97, 98}[i]) * time.Second); !beats[uid].Equal(want) {
			t.Errorf("%s: last heartbeat %v, want %v", uid, beats[uid], want)
		}
	}
	if rec, _, err := s.Slot(ctx, "ns", "s1"); err != nil || rec.Phase != "p99" {
		t.Errorf("slot s1 = %+v (err %v), want its last phase p99", rec, err)
	}
}

// TestCloseDuringOutage does not hang and reports what it could not write.
func TestCloseDuringOutage(t *testing.T) {
	dsn := server.NewDatabase(t)
	s, err := postgres.New(t.Context(), dsn, postgres.WithCloseTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	stopServer(t)
	if err := s.RecordTransition(t.Context(), storetest.Transition("ns", "s1", "Idle", "Busy", time.Time{})); !errors.Is(err, store.ErrBuffered) {
		t.Fatalf("err = %v, want ErrBuffered", err)
	}
	if err := s.Close(); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Close during an outage: err = %v, want ErrUnavailable with the count of lost writes", err)
	}
	if err := s.RecordHeartbeat(t.Context(), storetest.Beat("a", time.Time{})); err == nil {
		t.Fatal("a closed store accepted a heartbeat")
	}
}

// TestStartDuringAnOutage: a server unreachable when the store opens is an outage that began
// before the start (issue 30): New returns an unavailable store (liveness unknown, writes
// buffered, the availability metric at 0) instead of failing the manager's start; once the
// server answers, the store migrates the new database's schema, replays what it buffered and
// turns available. A refusal for good (a wrong password) still fails New.
func TestStartDuringAnOutage(t *testing.T) {
	dsn := server.NewDatabase(t) // created, never migrated
	resume := stopServer(t)
	reg := prometheus.NewRegistry()
	s, err := postgres.New(t.Context(), dsn, fastOptions(reg)...)
	if err != nil {
		t.Fatalf("New during an outage: %v; want an unavailable store", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if st := s.Status(); st.Available || st.LastError == "" {
		t.Fatalf("status %+v: want unavailable, with the connection error", st)
	}
	if v, _ := metric(t, reg, "botpool_store_up"); v != 0 {
		t.Fatalf("botpool_store_up = %v during the outage, want 0", v)
	}
	if _, err := s.LastHeartbeats(t.Context(), []types.UID{"bot"}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("LastHeartbeats before the server answered: %v, want ErrUnavailable", err)
	}
	beat := storetest.Beat("bot", storetest.T0)
	if err := s.RecordHeartbeat(t.Context(), beat); !errors.Is(err, store.ErrBuffered) {
		t.Fatalf("RecordHeartbeat during the outage: %v, want ErrBuffered", err)
	}

	resume()
	waitAvailable(t, s, true)
	got, err := s.LastHeartbeats(t.Context(), []types.UID{"bot"})
	if err != nil || !got["bot"].Equal(beat.At) {
		t.Fatalf("after the server answered: %v, %v; want the buffered beat at %s", got, err, beat.At)
	}
	if v, _ := metric(t, reg, "botpool_store_up"); v != 1 {
		t.Fatalf("botpool_store_up = %v after recovery, want 1", v)
	}

	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("nobody", "wrong")
	if s, err := postgres.New(t.Context(), u.String(), fastOptions(prometheus.NewRegistry())...); err == nil {
		_ = s.Close()
		t.Fatal("New with a wrong password opened a store; want the refusal")
	}
}
