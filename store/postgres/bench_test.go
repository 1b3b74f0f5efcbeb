package postgres_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/memory"
	"botpool.dev/botpool/store/postgres"
	"botpool.dev/botpool/store/storetest"
)

// BenchmarkRecordHeartbeat measures acknowledged heartbeats per second with many concurrent
// callers (go test -run '^$' -bench RecordHeartbeat ./store/postgres/).
func BenchmarkRecordHeartbeat(b *testing.B) {
	reg := prometheus.NewRegistry()
	dsn := server.NewDatabase(b)
	s, err := postgres.New(b.Context(), dsn, postgres.WithRegisterer(reg))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	var n atomic.Int64
	b.SetParallelism(64) // bots beat independently: many callers per core
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			uid := types.UID(fmt.Sprint("bot-", i%5000))
			if err := s.RecordHeartbeat(b.Context(), storetest.Beat(uid, storetest.T0.Add(time.Duration(i)))); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() == "botpool_store_heartbeat_batch_size" {
			h := f.GetMetric()[0].GetHistogram()
			b.ReportMetric(float64(b.N)/float64(h.GetSampleCount()), "beats/statement")
		}
	}
}

// BenchmarkWebhookOutbox measures the relay's side of the outbox: messages added, claimed in
// batches of 100 (namespaces taking turns) and finished, per second, on Postgres and, as the
// baseline of the same run, on the in-memory outbox (go test -run '^$' -bench WebhookOutbox
// ./store/postgres/). A backlog of 1,000 pending messages of other bots stays in the table
// throughout, as a relay that is behind would find it.
func BenchmarkWebhookOutbox(b *testing.B) {
	rates := map[string]float64{}
	for _, c := range []struct {
		name string
		open func(b *testing.B) store.Outbox
	}{
		{"memory", func(*testing.B) store.Outbox { return memory.NewOutbox(memory.DefaultHistoryLimit) }},
		{"postgres", func(b *testing.B) store.Outbox {
			s, err := postgres.New(b.Context(), server.NewDatabase(b), postgres.WithSharedClock())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			o := c.open(b)
			ctx := b.Context()
			now := storetest.T0
			message := func(bot string, seq int64, due time.Time) store.OutboxMessage {
				return store.OutboxMessage{ID: fmt.Sprintf("%s.%d", bot, seq), BotUID: types.UID(bot), Seq: seq,
					Namespace: fmt.Sprint("team-", len(bot)%50), Name: bot, Phase: "Done",
					URL: "https://hooks.example/x", Payload: []byte(`{"phase":"Done"}`), CreatedAt: due}
			}
			for i := range 1000 { // the backlog: due in an hour
				if err := o.AddMessage(ctx, message(fmt.Sprint("waiting-", i), 1, now.Add(time.Hour))); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				if err := o.AddMessage(ctx, message(fmt.Sprint("bot-", i%5000), int64(i/5000+1), now)); err != nil {
					b.Fatal(err)
				}
				if i%100 != 99 && i != b.N-1 {
					continue
				}
				for {
					ms, err := o.ClaimMessages(ctx, now, 2*time.Minute, 100)
					if err != nil {
						b.Fatal(err)
					}
					for _, m := range ms {
						if err := o.FinishAttempt(ctx, m.ID, store.OutboxOutcome{Attempt: m.Attempts, State: store.OutboxDelivered}); err != nil {
							b.Fatal(err)
						}
					}
					if len(ms) < 100 {
						break
					}
				}
			}
			b.StopTimer()
			rates[c.name] = float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rates[c.name], "messages/s")
		})
	}
	if rates["postgres"] > 0 {
		fmt.Printf("messages added, claimed and finished per second: memory %.0f, postgres %.0f (memory/postgres %.1f×)\n",
			rates["memory"], rates["postgres"], rates["memory"]/rates["postgres"])
	}
}
