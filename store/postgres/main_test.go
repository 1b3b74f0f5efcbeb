package postgres_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"botpool.dev/botpool/internal/pgtest"
	"botpool.dev/botpool/store/postgres"
)

// server is the package's one throwaway Postgres; each test gets its own database.
var server *pgtest.Server

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	var err error
	server, err = pgtest.Start(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting Postgres:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := server.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping Postgres:", err)
	}
	os.Exit(code)
}

// fastOptions keep the outage tests quick: a short backoff and statement timeout.
func fastOptions(reg prometheus.Registerer) []postgres.Option {
	return []postgres.Option{
		postgres.WithRegisterer(reg),
		postgres.WithRetryBackoff(20*time.Millisecond, 200*time.Millisecond),
		postgres.WithWriteTimeout(2 * time.Second),
	}
}

// newStore opens a store on a fresh database and closes it at the end of the test.
func newStore(t *testing.T, opts ...postgres.Option) (*postgres.Store, string) {
	t.Helper()
	dsn := server.NewDatabase(t)
	s := openStore(t, dsn, opts...)
	return s, dsn
}

func openStore(t *testing.T, dsn string, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := postgres.New(ctx, dsn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("closing the store: %v", err)
		}
	})
	return s
}
