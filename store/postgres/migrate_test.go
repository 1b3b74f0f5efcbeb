package postgres_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"botpool.dev/botpool/store/postgres"
	"botpool.dev/botpool/store/storetest"
)

var tables = []string{"bots", "bot_pool_slots", "slot_transitions", "bot_events", "slot_asks", "webhook_outbox"}

func TestMigrateFromEmptyThenAgain(t *testing.T) {
	dsn := server.NewDatabase(t)
	ctx := t.Context()

	s, err := postgres.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertSlot(ctx, storetest.Slot("ns", "s1").App("app-1").Record()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// A second start finds the schema current, applies nothing and keeps the data.
	s = openStore(t, dsn)
	c := sqlConn(t, dsn)
	for _, table := range tables {
		if n := queryInt(t, c, `SELECT count(*) FROM information_schema.tables WHERE table_name = $1`, table); n != 1 {
			t.Errorf("table %s: found %d", table, n)
		}
	}
	if n := queryInt(t, c, `SELECT count(*) FROM botpool_schema_version WHERE version_id > 0`); n != migrations {
		t.Errorf("%d migrations recorded, want %d (re-run applied again?)", n, migrations)
	}
	if _, ok, err := s.Slot(ctx, "ns", "s1"); err != nil || !ok {
		t.Fatalf("slot written before the restart: ok=%v err=%v", ok, err)
	}
}

// migrations is the number of files in migrations/.
const migrations = 5

// TestMigrateConcurrently starts several stores on one empty database at once, as replicas of
// a rollout do: the advisory lock makes them take turns, and exactly one applies the schema.
func TestMigrateConcurrently(t *testing.T) {
	dsn := server.NewDatabase(t)
	const replicas = 4
	var wg sync.WaitGroup
	errs := make([]error, replicas)
	for i := range replicas {
		wg.Go(func() {
			s, err := postgres.New(t.Context(), dsn)
			if err == nil {
				err = s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	c := sqlConn(t, dsn)
	if n := queryInt(t, c, `SELECT count(*) FROM botpool_schema_version WHERE version_id > 0`); n != migrations {
		t.Fatalf("%d migrations recorded, want %d", n, migrations)
	}
}

// TestNewOpensUnavailableWhenUnreachable: a server nothing listens for is an outage that began
// before the start (issue 30): New returns at once an unavailable store whose status names the
// server and the error, not a failure of the manager's start (TestStartDuringAnOutage follows
// one through its recovery).
func TestNewOpensUnavailableWhenUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	// Port 1 on loopback: nothing listens, the connection is refused at once.
	s, err := postgres.New(ctx, "postgres://postgres@127.0.0.1:1/botpool?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatalf("New: %v; want an unavailable store", err)
	}
	defer func() { _ = s.Close() }()
	if st := s.Status(); st.Available || !strings.Contains(st.LastError, "connecting to Postgres at 127.0.0.1:1/botpool") {
		t.Fatalf("status %+v: want unavailable, naming the server", st)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("New took %v to return", d)
	}
}

func TestNewRejectsMalformedURL(t *testing.T) {
	if _, err := postgres.New(t.Context(), "postgres://%zz"); err == nil || !strings.Contains(err.Error(), "parsing the database URL") {
		t.Fatalf("err = %v, want a parse error", err)
	}
}
