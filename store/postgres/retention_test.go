package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/postgres"
	"botpool.dev/botpool/store/storetest"
)

// TestRetentionJobPrunesInBatches runs the retention job on a fake clock against Postgres:
// each run deletes what has aged past the retention by then, in statements of at most the
// batch size, and keeps the rest.
func TestRetentionJobPrunesInBatches(t *testing.T) {
	clk := clocktesting.NewFakeClock(storetest.T0)
	reg := prometheus.NewRegistry()
	s, dsn := newStore(t, postgres.WithClock(clk), postgres.WithRegisterer(reg), postgres.WithPruneBatch(3),
		postgres.WithHeartbeatBatch(1, 0))
	ctx := t.Context()

	// Ten events a day old, ten an hour old; five finished bots a day ago.
	for i := range 10 {
		for _, age := range []time.Duration{24 * time.Hour, time.Hour} {
			if err := s.AppendBotEvents(ctx, []store.BotEvent{storetest.Event("a", "log", i, storetest.T0.Add(-age))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 5 {
		rec := storetest.Bot(storetestUID(i)).Phase("Done").Finished(storetest.T0.Add(-24 * time.Hour)).Record()
		if err := s.UpsertBot(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	job := &store.RetentionJob{Store: s, Retention: store.Retention{Events: 12 * time.Hour, FinishedBots: 12 * time.Hour},
		Interval: time.Hour, Clock: clk, Log: logr.Discard()}
	jobCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- job.Start(jobCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("the retention job stopped with an error: %v", err)
		}
	})

	c := sqlConn(t, dsn)
	// The first run, at start: the day-old rows go, in batches of three.
	eventually(t, 30*time.Second, "the first run", func() bool {
		return queryInt(t, c, `SELECT count(*) FROM bot_events`) == 10 && queryInt(t, c, `SELECT count(*) FROM bots`) == 0
	})
	if n, _ := metric(t, reg, "botpool_store_statements_total", "op", "prune_events"); n != 4 {
		t.Fatalf("%v statements deleted 10 events in batches of 3, want 4", n)
	}
	if n, _ := metric(t, reg, "botpool_store_pruned_rows_total", "table", "bot_events"); n != 10 {
		t.Fatalf("pruned_rows_total{table=bot_events} = %v, want 10", n)
	}
	// Twelve hours later the hour-old events are past the retention: the next run takes them.
	eventually(t, 10*time.Second, "the job to wait for its ticker", clk.HasWaiters)
	clk.Step(12 * time.Hour)
	eventually(t, 30*time.Second, "the second run", func() bool {
		return queryInt(t, c, `SELECT count(*) FROM bot_events`) == 0
	})
}

func storetestUID(i int) types.UID { return types.UID(fmt.Sprintf("done-%d", i)) }

func TestRetentionValidate(t *testing.T) {
	if err := (store.Retention{Events: time.Minute}).Validate(); err == nil {
		t.Error("a retention of a minute accepted")
	}
	if err := (store.Retention{Events: 720 * time.Hour}).Validate(); err != nil {
		t.Errorf("720h refused: %v", err)
	}
	if (store.Retention{}).Enabled() {
		t.Error("a zero retention prunes")
	}
}
