package postgres_test

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/storetest"
)

// TestRefusedWritesAreNotBuffered checks that only an outage buffers: a uniqueness violation is
// ErrConflict and any other SQL error is returned as it is, the store staying available.
func TestRefusedWritesAreNotBuffered(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, dsn := newStore(t, fastOptions(reg)...)
	ctx := t.Context()
	if err := s.UpsertSlot(ctx, storetest.Slot("ns", "s1").App("app-1").Record()); err != nil {
		t.Fatal(err)
	}
	err := s.UpsertSlot(ctx, storetest.Slot("ns", "s2").App("app-1").Record())
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate application uuid: err = %v, want ErrConflict", err)
	}
	t.Logf("conflict: %v", err)

	// A table dropped behind the store's back: a plain SQL error, not an outage.
	if _, err := sqlConn(t, dsn).Exec(ctx, `DROP TABLE bot_events`); err != nil {
		t.Fatal(err)
	}
	err = s.AppendBotEvents(ctx, []store.BotEvent{storetest.Event("a", "log", "x", storetest.T0)})
	if err == nil || errors.Is(err, store.ErrBuffered) || errors.Is(err, store.ErrConflict) {
		t.Fatalf("insert into a missing table: err = %v, want the SQL error", err)
	}

	if st := s.Status(); !st.Available || st.Buffered != 0 {
		t.Fatalf("status = %+v, want available with nothing buffered", st)
	}
	for kind, want := range map[string]float64{"conflict": 1, "other": 1, "connection": 0} {
		if got, _ := metric(t, reg, "botpool_store_errors_total", "kind", kind); got != want {
			t.Errorf("errors_total{kind=%q} = %v, want %v", kind, got, want)
		}
	}
}
