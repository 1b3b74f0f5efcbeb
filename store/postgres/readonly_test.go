package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/postgres"
	"botpool.dev/botpool/store/storetest"
)

// TestReadOnlyDatabaseMakesLivenessUnknown makes the database read-only under a running store:
// the server still answers reads, but a heartbeat it refuses must make liveness unknown (the
// beat buffered, reads ErrUnavailable), never leave the older beat for the controllers to judge
// by. Before, the refusal was an ordinary error: the store stayed available and its reads
// returned ever older beats, and every running bot ended HeartbeatTimeout.
func TestReadOnlyDatabaseMakesLivenessUnknown(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, dsn := newStore(t, fastOptions(reg)...)
	ctx := t.Context()
	old := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	if err := s.RecordHeartbeat(ctx, storetest.Beat("a", old)); err != nil {
		t.Fatal(err)
	}

	admin := sqlConn(t, dsn)
	var db string
	if err := admin.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	setReadOnly := func(on bool) {
		t.Helper()
		value := map[bool]string{true: "on", false: "off"}[on]
		ctx := context.Background() // also in the cleanup, after the test's context ended
		if _, err := admin.Exec(ctx, `ALTER DATABASE `+db+` SET default_transaction_read_only = `+value); err != nil {
			t.Fatal(err)
		}
		// The setting applies to new sessions: end the store's.
		if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`); err != nil {
			t.Fatal(err)
		}
	}
	setReadOnly(true)
	t.Cleanup(func() { setReadOnly(false) })

	// The store notices its ended sessions and reconnects, read-only now: reads work again.
	eventually(t, 30*time.Second, "a read on the read-only database", func() bool {
		_, err := s.LastHeartbeats(ctx, []types.UID{"a"})
		return err == nil
	})

	err := s.RecordHeartbeat(ctx, storetest.Beat("a", time.Time{}))
	if !errors.Is(err, store.ErrBuffered) {
		t.Fatalf("heartbeat on a read-only database: err = %v, want ErrBuffered", err)
	}
	got, err := s.LastHeartbeats(ctx, []types.UID{"a"})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("liveness after a refused beat = %v (err %v), want ErrUnavailable: the stale beat %v must not be read", got, err, old)
	}
	st := s.Status()
	if st.Available || st.Buffered != 1 || !strings.Contains(st.LastError, "read-only") {
		t.Fatalf("status = %+v, want unavailable with the beat buffered and the read-only error", st)
	}
	if n, _ := metric(t, reg, "botpool_store_errors_total", "kind", "connection"); n < 1 {
		t.Fatalf("errors_total{kind=connection} = %v, want the read-only refusal counted", n)
	}

	// Writable again: the recovery loop writes the beat, then liveness is known and fresh.
	// Turning read-only off ends the store's sessions again (57P01): a read on a pooled session
	// the server just ended fails once more, so wait for the recovery instead of reading once.
	setReadOnly(false)
	waitAvailable(t, s, true)
	eventually(t, 30*time.Second, "the buffered beat read after recovery", func() bool {
		got, err = s.LastHeartbeats(ctx, []types.UID{"a"})
		return err == nil && got["a"].After(old)
	})
}

// TestHeartbeatsOfSkewedReplicasShareOneClock runs two stores on one database, as two
// replicas whose clocks disagree by ten minutes: a beat received by one and judged by the
// other is as fresh in the judge's clock as it was in the receiver's. Before, the receiver's
// clock stamped it and the judge saw a beat ten minutes old (or ten minutes in the future).
func TestHeartbeatsOfSkewedReplicasShareOneClock(t *testing.T) {
	const skew = 10 * time.Minute
	dsn := server.NewDatabase(t)
	receiverClock := clocktesting.NewFakeClock(storetest.T0)
	judgeClock := clocktesting.NewFakeClock(storetest.T0.Add(skew))
	receiver := openStore(t, dsn, postgres.WithClock(receiverClock), postgres.WithHeartbeatBatch(1, 0))
	judge := openStore(t, dsn, postgres.WithClock(judgeClock), postgres.WithHeartbeatBatch(1, 0))
	ctx := t.Context()

	if err := receiver.RecordHeartbeat(ctx, storetest.Beat("a", time.Time{})); err != nil {
		t.Fatal(err)
	}
	// The receiver reads its own beat back exactly.
	own, err := receiver.LastHeartbeats(ctx, []types.UID{"a"})
	if err != nil || !own["a"].Equal(storetest.T0) {
		t.Fatalf("receiver reads its beat as %v (err %v), want %v", own["a"], err, storetest.T0)
	}
	got, err := judge.LastHeartbeats(ctx, []types.UID{"a"})
	if err != nil {
		t.Fatal(err)
	}
	// Real time passes between the two stores' clock readings and the beat; a minute bounds it
	// on any machine, and is far below the skew.
	if age := judgeClock.Now().Sub(got["a"]); age.Abs() > time.Minute {
		t.Fatalf("the judge reads the beat as %v old (beat %v, judge's now %v), want about 0", age, got["a"], judgeClock.Now())
	}
	// And the other way round: a beat received by the fast replica is not in the slow one's future.
	if err := judge.RecordHeartbeat(ctx, storetest.Beat("b", time.Time{})); err != nil {
		t.Fatal(err)
	}
	got, err = receiver.LastHeartbeats(ctx, []types.UID{"b"})
	if err != nil {
		t.Fatal(err)
	}
	if age := receiverClock.Now().Sub(got["b"]); age.Abs() > time.Minute {
		t.Fatalf("the slow replica reads the fast one's beat as %v old, want about 0", age)
	}
}

// TestAnyRefusedHeartbeatMakesLivenessUnknown: whatever the reason the database refuses a
// heartbeat batch, even one the store does not know as an outage (here a column renamed behind
// its back), the beats are buffered and liveness is unknown until they are written; they are
// never refused and only logged while older beats are read as current.
func TestAnyRefusedHeartbeatMakesLivenessUnknown(t *testing.T) {
	s, dsn := newStore(t, fastOptions(nil)...)
	ctx := t.Context()
	old := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	if err := s.RecordHeartbeat(ctx, storetest.Beat("a", old)); err != nil {
		t.Fatal(err)
	}
	admin := sqlConn(t, dsn)
	rename := func(from, to string) {
		t.Helper()
		if _, err := admin.Exec(context.Background(), `ALTER TABLE bots RENAME COLUMN `+from+` TO `+to); err != nil {
			t.Fatal(err)
		}
	}
	rename("last_heartbeat", "hidden")
	if err := s.RecordHeartbeat(ctx, storetest.Beat("a", time.Time{})); !errors.Is(err, store.ErrBuffered) {
		t.Fatalf("a heartbeat the database refused: err = %v, want ErrBuffered", err)
	}
	if got, err := s.LastHeartbeats(ctx, []types.UID{"a"}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("liveness after a refused beat = %v (err %v), want ErrUnavailable", got, err)
	}
	rename("hidden", "last_heartbeat")
	waitAvailable(t, s, true)
	got, err := s.LastHeartbeats(ctx, []types.UID{"a"})
	if err != nil || !got["a"].After(old) {
		t.Fatalf("liveness after the column is back = %v (err %v), want the buffered beat", got["a"], err)
	}
}
