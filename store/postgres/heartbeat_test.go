package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"botpool.dev/botpool/store/postgres"
	"botpool.dev/botpool/store/storetest"
)

// TestHeartbeatsAreBatched sends many concurrent heartbeats, as a fleet of bots does, and checks
// they reach Postgres in few statements, every call acknowledged, then reads them in one query.
func TestHeartbeatsAreBatched(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, _ := newStore(t, postgres.WithRegisterer(reg))
	ctx := t.Context()

	const bots = 2000
	errs := make(chan error, bots)
	uids := make([]types.UID, bots)
	for i := range bots {
		uids[i] = types.UID(fmt.Sprintf("bot-%04d", i))
		go func() {
			errs <- s.RecordHeartbeat(ctx, storetest.Beat(uids[i], storetest.T0.Add(time.Duration(i)*time.Millisecond)))
		}()
	}
	for range bots {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	statements, rows := metric(t, reg, "botpool_store_heartbeat_batch_size")
	t.Logf("%d heartbeats in %v statements (%.0f per statement)", bots, statements, rows/statements)
	if rows != bots {
		t.Fatalf("batches carried %v heartbeats, want %d", rows, bots)
	}
	if statements > bots/10 {
		t.Fatalf("%v statements for %d heartbeats: not batched", statements, bots)
	}
	if n := bucketCount(t, reg, "botpool_store_heartbeat_batch_size", postgres.DefaultBatchSize); n != statements {
		t.Fatalf("only %v of %v batches within the size bound %d", n, statements, postgres.DefaultBatchSize)
	}

	got, err := s.LastHeartbeats(ctx, uids)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != bots || !got[uids[bots-1]].Equal(storetest.T0.Add((bots-1)*time.Millisecond)) {
		t.Fatalf("read %d heartbeats (last %v), want %d", len(got), got[uids[bots-1]], bots)
	}
	if n, _ := metric(t, reg, "botpool_store_statements_total", "op", "last_heartbeats"); n != 1 {
		t.Fatalf("LastHeartbeats of %d bots took %v statements, want 1", bots, n)
	}
}

// TestBatchWaitsForItsInterval drives the flush interval with a fake clock: a lone beat is
// written when its batch is due, not before; a full batch is written at once.
func TestBatchWaitsForItsInterval(t *testing.T) {
	clk := clocktesting.NewFakeClock(storetest.T0)
	reg := prometheus.NewRegistry()
	s, _ := newStore(t, postgres.WithClock(clk), postgres.WithRegisterer(reg), postgres.WithHeartbeatBatch(3, time.Second))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	lone := make(chan error, 1)
	go func() { lone <- s.RecordHeartbeat(ctx, storetest.Beat("a", time.Time{})) }()
	eventually(t, 10*time.Second, "the flusher to wait for the interval", clk.HasWaiters)
	select {
	case err := <-lone:
		t.Fatalf("a lone beat returned (%v) before its batch was due", err)
	default:
	}
	clk.Step(time.Second)
	if err := <-lone; err != nil {
		t.Fatal(err)
	}
	got, err := s.LastHeartbeats(ctx, []types.UID{"a"})
	if err != nil || !got["a"].Equal(storetest.T0) {
		t.Fatalf("last heartbeat = %v (err %v), want the fake clock's now %v", got["a"], err, storetest.T0)
	}

	// Three bots fill a batch: written without the clock moving.
	full := make(chan error, 3)
	for _, uid := range []types.UID{"b", "c", "d"} {
		go func() { full <- s.RecordHeartbeat(ctx, storetest.Beat(uid, storetest.T0)) }()
	}
	for range 3 {
		if err := <-full; err != nil {
			t.Fatal(err)
		}
	}
	if n, sum := metric(t, reg, "botpool_store_heartbeat_batch_size"); n != 2 || sum != 4 {
		t.Fatalf("%v batches of %v beats in all, want 2 batches of 1 and 3", n, sum)
	}
}
