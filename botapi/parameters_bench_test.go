package botapi

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// BenchmarkConfigParameters: the config answer that hands out a binding, for bots without
// parameters and for bots with parameters (about 1 KiB, over pool defaults) and two secret
// parameters from one Secret, which the answer reads past the cache. One run of each on the
// envtest API server; the figures are the answer's latency as the container sees it, and the
// ratio of the two. `go test -run '^$' -bench ConfigParameters -benchtime 1x ./botapi/`
func BenchmarkConfigParameters(b *testing.B) {
	const claims = 100
	h := newHarness(b)
	ctx := context.Background()
	must(b, env.Client.Create(ctx, bt.MakePool(h.ns, "pool").Placement("project", "server", "production").ParameterDefaults(`{"language":"en","recording":{"format":"mp4"}}`).Obj()))
	must(b, env.Client.Create(ctx, bt.ParameterSecret(h.ns, "stt", true, map[string]string{"apiKey": "dg_" + strings.Repeat("k", 40), "region": "eu"})))
	params := `{"transcription":{"provider":"deepgram","model":"nova-3","language":"de","keywords":[` +
		strings.TrimSuffix(strings.Repeat(`"botpool",`, 80), ",") + `]},"upload":{"bucket":"s3://team-a-recordings"}}`
	measure := func(mode string, withParams bool) []time.Duration {
		lat := make([]time.Duration, 0, claims)
		for i := range claims {
			f := h.slot(fmt.Sprintf("%s-%03d", mode, i))
			bot := bt.MakeBot(h.ns, fmt.Sprintf("%s-bot-%03d", mode, i)).MeetingURL("https://meet.google.com/abc-defg-hij")
			if withParams {
				bot = bot.Parameters(params).SecretParameter("apiKey", "stt", "apiKey").SecretParameter("region", "stt", "region")
			}
			o := bot.Obj()
			must(b, env.Client.Create(ctx, o))
			o.Status.Phase = v1.BotDeploying
			must(b, env.Client.Status().Update(ctx, o))
			h.synced(o)
			h.bind(f, o)
			start := time.Now()
			cfg, err := h.client(f).Config(ctx)
			lat = append(lat, time.Since(start))
			if err != nil || (withParams && (len(cfg.Parameters) == 0 || len(cfg.SecretParameters) != 2)) {
				b.Fatalf("claim %d (%s): %d bytes of parameters, %d secret values, %v", i, mode, len(cfg.Parameters), len(cfg.SecretParameters), err)
			}
		}
		slices.Sort(lat)
		return lat
	}
	b.ResetTimer()
	for range b.N {
		plain := measure("plain", false)
		with := measure("params", true)
		q := func(l []time.Duration, p float64) time.Duration { return l[int(p*float64(len(l)-1))] }
		fmt.Printf("Config answer that claims a binding (%d claims each, envtest API server):\n", claims)
		fmt.Printf("  without parameters: p50 %v, p99 %v\n", q(plain, .5).Round(10*time.Microsecond), q(plain, .99).Round(10*time.Microsecond))
		fmt.Printf("  with parameters (%d bytes over pool defaults) and 2 secret parameters: p50 %v, p99 %v\n", len(params),
			q(with, .5).Round(10*time.Microsecond), q(with, .99).Round(10*time.Microsecond))
		ratio := float64(q(with, .5)) / float64(q(plain, .5))
		fmt.Printf("  with/without p50: %.2f× (the Secret's GET past the cache is the difference)\n", ratio)
		b.ReportMetric(float64(q(plain, .5).Microseconds()), "p50-us-plain")
		b.ReportMetric(float64(q(with, .5).Microseconds()), "p50-us-params")
		b.ReportMetric(ratio, "p50-ratio")
	}
}
