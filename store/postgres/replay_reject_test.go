package postgres_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/storetest"
)

// TestReplayIsolatesARefusedRow buffers many tenants' audit rows during an outage, one of which
// the database refuses at replay (a number beyond jsonb's range: valid JSON, so no validation
// before the buffer catches it). The replay gives up that row alone, counted, and writes every
// other. Before, the whole replayed batch (up to a thousand rows of every tenant) was dropped
// for it.
func TestReplayIsolatesARefusedRow(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, dsn := newStore(t, fastOptions(reg)...)
	ctx := t.Context()

	resume := stopServer(t)
	good := 0
	for i := range 40 {
		ns := []string{"team-a", "team-b", "team-c"}[i%3]
		e := storetest.Event("bot-1", "log", map[string]int{"n": i}, storetest.T0)
		e.Namespace = ns
		if err := s.AppendBotEvents(ctx, []store.BotEvent{e}); !errors.Is(err, store.ErrBuffered) {
			t.Fatalf("event %d during the outage: %v, want ErrBuffered", i, err)
		}
		good++
		if i == 17 {
			bad := storetest.Event("bot-evil", "log", nil, storetest.T0)
			bad.Data = json.RawMessage(`{"n":1e200000}`)
			if err := s.AppendBotEvents(ctx, []store.BotEvent{bad}); !errors.Is(err, store.ErrBuffered) {
				t.Fatalf("the bad event during the outage: %v, want ErrBuffered", err)
			}
		}
		if err := s.RecordTransition(ctx, storetest.Transition("team-a", "slot-1", "Idle", "Busy", storetest.T0)); !errors.Is(err, store.ErrBuffered) {
			t.Fatalf("transition %d during the outage: %v", i, err)
		}
	}
	resume()
	waitAvailable(t, s, true)

	c := sqlConn(t, dsn)
	if n := queryInt(t, c, `SELECT count(*) FROM bot_events WHERE bot_uid = 'bot-1'`); n != good {
		t.Fatalf("%d of the %d good events written after the replay, want all", n, good)
	}
	if n := queryInt(t, c, `SELECT count(*) FROM bot_events WHERE bot_uid = 'bot-evil'`); n != 0 {
		t.Fatalf("the refused event was written %d times", n)
	}
	if n := queryInt(t, c, `SELECT count(*) FROM slot_transitions`); n != 40 {
		t.Fatalf("%d of the 40 transitions written, want all", n)
	}
	if n, _ := metric(t, reg, "botpool_store_rejected_rows_total", "table", "bot_events"); n != 1 {
		t.Fatalf("rejected_rows_total{table=bot_events} = %v, want 1", n)
	}
	if st := s.Status(); st.Dropped != 1 || st.Buffered != 0 {
		t.Fatalf("status = %+v, want one dropped row and nothing buffered", st)
	}
}
