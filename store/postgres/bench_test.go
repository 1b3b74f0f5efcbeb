package postgres_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

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
