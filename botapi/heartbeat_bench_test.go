package botapi

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "botpool.dev/botpool/api/v1alpha1"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/pgtest"
	"botpool.dev/botpool/internal/slottoken"
	"botpool.dev/botpool/store/postgres"
)

// Heartbeats into Postgres through the bot API (issue 8, item 6): many bound bots beat over
// HTTP at a steady pace, each with its binding credential, into the Postgres store; the figure is
// the sustained rate of acknowledged beats and their latency as the bots see it.
const (
	beatTargetRate = 20_000
	beatTargetP99  = 25 * time.Millisecond
)

// beatLoad is the shape of the load: every bot beats every interval (a bot's 10 s, compressed),
// each client posts for its share of the bots one beat at a time, over a keep-alive connection.
type beatLoad struct {
	bots     int
	clients  int
	interval time.Duration
	warmup   time.Duration
	measure  time.Duration
}

func (l beatLoad) offered() float64 { return float64(l.bots) / l.interval.Seconds() }

// fleetBot is a bot bound to a slot, with the binding credential its container claimed.
type fleetBot struct {
	name  string
	uid   types.UID
	token string
}

// newFleet creates n slots, each with its token Secret, its hash and a bound bot, and waits until the
// API's cache holds them all.
func newFleet(tb testing.TB, ns string, n int) []fleetBot {
	tb.Helper()
	ctx := context.Background()
	fleet := make([]fleetBot, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range fleet {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f, err := createBoundBot(ctx, ns, i)
			if err != nil {
				errs <- err
				return
			}
			fleet[i] = f
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
	kubetest.Eventually(tb, 2*time.Minute, func() error {
		var slots v1.BotPoolSlotList
		var bots v1.BotList
		for _, l := range []client.ObjectList{&slots, &bots} {
			if err := objCache.List(ctx, l, client.InNamespace(ns)); err != nil {
				return err
			}
		}
		withToken, claimed := 0, 0
		for i := range slots.Items {
			if slots.Items[i].Status.TokenSHA256 != "" {
				withToken++
			}
		}
		for i := range bots.Items {
			if bots.Items[i].Status.Binding != nil {
				claimed++
			}
		}
		if withToken != n || claimed != n {
			return fmt.Errorf("the cache holds %d slots with a token and %d claimed bots of %d", withToken, claimed, n)
		}
		return nil
	})
	return fleet
}

func createBoundBot(ctx context.Context, ns string, i int) (fleetBot, error) {
	name, slotName := fmt.Sprintf("bot-%05d", i), fmt.Sprintf("pool-zoom-%05d", i)
	b := bt.MakeBot(ns, name).Obj()
	if err := env.Client.Create(ctx, b); err != nil {
		return fleetBot{}, err
	}
	s := bt.MakeSlot(ns, slotName, "pool").BoundTo(b.Name, b.UID).Obj()
	if err := env.Client.Create(ctx, s); err != nil {
		return fleetBot{}, err
	}
	token, err := slottoken.New()
	if err != nil {
		return fleetBot{}, err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: slottoken.SecretName(slotName),
			Labels: map[string]string{v1.LabelSlotToken: "true", v1.LabelSlot: slotName}},
		Data: map[string][]byte{slottoken.Key: []byte(token)},
	}
	if err := controllerutil.SetControllerReference(s, secret, env.Scheme); err != nil {
		return fleetBot{}, err
	}
	if err := env.Client.Create(ctx, secret); err != nil {
		return fleetBot{}, err
	}
	s.Status.TokenSHA256 = slottoken.Hash([]byte(token))
	if err := env.Client.Status().Update(ctx, s); err != nil {
		return fleetBot{}, err
	}
	// The claim its container's config call would write: heartbeats carry its credential.
	cred, hash := newBindingCredential()
	b.Status.Binding = &v1.BindingClaim{SlotName: slotName, SlotUID: s.UID, ClaimedAt: metav1.Now(), CredentialSHA256: hash}
	if err := env.Client.Status().Update(ctx, b); err != nil {
		return fleetBot{}, err
	}
	return fleetBot{name: name, uid: b.UID, token: cred}, nil
}

// serveBotAPI runs the bot API as the manager does (Server.Start, its timeouts) on a loopback
// port until the benchmark ends, and returns its address.
func serveBotAPI(tb testing.TB, cfg Config) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Addr = l.Addr().String()
	_ = l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(cfg).Start(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Error(err)
		}
	})
	kubetest.Eventually(tb, 10*time.Second, func() error {
		resp, err := http.Get("http://" + cfg.Addr + "/")
		if err != nil {
			return err
		}
		return resp.Body.Close()
	})
	return cfg.Addr
}

// beatResult is what the clients saw during the measured window of one load.
type beatResult struct {
	load      beatLoad
	beats     int // answered 2xx
	non2xx    map[int]int
	transport int // requests that got no answer
	latencies []time.Duration
	cpu       time.Duration // this process's CPU (clients, API, store) in the window
	pgCPU     time.Duration // Postgres's
	// statements and rows are the store's heartbeat statements in the window.
	statements uint64
	rows       float64
	stmtTime   time.Duration
}

func (r beatResult) rate() float64 { return float64(r.beats) / r.load.measure.Seconds() }

func (r beatResult) quantile(q float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	return r.latencies[min(len(r.latencies)-1, int(q*float64(len(r.latencies))))]
}

func (r beatResult) failures() int {
	n := r.transport
	for _, c := range r.non2xx {
		n += c
	}
	return n
}

// sustained reports whether the load was carried: (nearly) every offered beat acknowledged,
// none failed, with p99 within the target.
func (r beatResult) sustained() bool {
	return r.rate() >= 0.97*r.load.offered() && r.failures() == 0 && r.quantile(0.99) <= beatTargetP99
}

// beatConn is one bot-side keep-alive HTTP/1.1 connection. It writes requests and reads
// answers on the calling goroutine: net/http's client hands every request to two goroutines of
// its own, which on a machine of two cores shared with the server would take a large part of
// the CPU the server is measured on. Bots run elsewhere in production; here the load should
// cost as little as it can.
type beatConn struct {
	addr string
	conn net.Conn
	r    *bufio.Reader
}

// beat posts one heartbeat and returns the answer's status code.
func (c *beatConn) beat(bot fleetBot) (int, error) {
	if c.conn == nil {
		conn, err := net.Dial("tcp", c.addr)
		if err != nil {
			return 0, err
		}
		c.conn, c.r = conn, bufio.NewReader(conn)
	}
	req := "POST /v1/bots/" + bot.name + "/heartbeat HTTP/1.1\r\nHost: " + c.addr +
		"\r\nAuthorization: Bearer " + bot.token +
		"\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: 2\r\n\r\n{}"
	_ = c.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c.conn, req); err != nil {
		c.close()
		return 0, err
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		c.close()
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.Close {
		c.close()
	}
	return resp.StatusCode, err
}

func (c *beatConn) close() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
}

// runBeats drives one load. Each client owns bots/clients bots and sends their beats one at a
// time on a fixed schedule (open loop: a slow answer delays that client's next beat but not the
// schedule, so a server that cannot keep up shows as a rate below the offered one). Latency is
// from sending a request to reading its whole answer.
func runBeats(addr string, fleet []fleetBot, load beatLoad, reg *prometheus.Registry, pgPort int) beatResult {
	start := time.Now()
	from, to := start.Add(load.warmup), start.Add(load.warmup+load.measure)
	type tally struct {
		beats, transport int
		non2xx           map[int]int
		latencies        []time.Duration
	}
	tallies := make([]tally, load.clients)
	var wg sync.WaitGroup
	for c := range load.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := &tallies[c]
			t.non2xx = map[int]int{}
			conn := &beatConn{addr: addr}
			defer conn.close()
			var mine []fleetBot
			for i := c; i < len(fleet); i += load.clients {
				mine = append(mine, fleet[i])
			}
			gap := load.interval / time.Duration(len(mine))
			next := start.Add(time.Duration(rand.Int64N(int64(gap)))) // clients do not beat in step
			for i := 0; ; i++ {
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				sent := time.Now()
				if !sent.Before(to) {
					return
				}
				next = next.Add(gap)
				code, err := conn.beat(mine[i%len(mine)])
				took := time.Since(sent)
				if sent.Before(from) {
					continue // warming up: connections, caches, the store's batches
				}
				switch {
				case err != nil:
					t.transport++
				case code/100 != 2:
					t.non2xx[code]++
				default:
					t.beats++
					t.latencies = append(t.latencies, took)
				}
			}
		}()
	}
	// The window's CPU and statements: sampled at its edges.
	time.Sleep(time.Until(from))
	cpu0, pg0 := processCPU(), postgresCPU(pgPort)
	st0, rows0, took0 := batchStats(reg)
	time.Sleep(time.Until(to))
	cpu1, pg1 := processCPU(), postgresCPU(pgPort)
	st1, rows1, took1 := batchStats(reg)
	wg.Wait()

	res := beatResult{load: load, non2xx: map[int]int{}, cpu: cpu1 - cpu0, pgCPU: pg1 - pg0,
		statements: st1 - st0, rows: rows1 - rows0, stmtTime: took1 - took0}
	for _, t := range tallies {
		res.beats += t.beats
		res.transport += t.transport
		for code, n := range t.non2xx {
			res.non2xx[code] += n
		}
		res.latencies = append(res.latencies, t.latencies...)
	}
	slices.Sort(res.latencies)
	return res
}

// processCPU is the CPU time (user and system) this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// postgresCPU is the CPU time the Postgres server listening on port and its backends used so
// far, read from /proc (0 where there is none).
func postgresCPU(port int) time.Duration {
	const tick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	procs, _ := os.ReadDir("/proc")
	type stat struct {
		ppid  int
		ticks int64
	}
	stats, postmaster := map[int]stat{}, 0
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + p.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15) cutime(16) cstime(17): comm may hold spaces.
		f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
		if len(f) < 15 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		var ticks int64
		for _, i := range []int{11, 12, 13, 14} {
			n, _ := strconv.ParseInt(f[i], 10, 64)
			ticks += n
		}
		stats[pid] = stat{ppid: ppid, ticks: ticks}
		if cmd, err := os.ReadFile("/proc/" + p.Name() + "/cmdline"); err == nil &&
			bytes.Contains(cmd, []byte("port="+strconv.Itoa(port)+"\x00")) && bytes.Contains(cmd, []byte("postgres")) {
			postmaster = pid
		}
	}
	if postmaster == 0 {
		return 0
	}
	var ticks int64
	for pid, st := range stats {
		if pid == postmaster || st.ppid == postmaster {
			ticks += st.ticks
		}
	}
	return time.Duration(ticks) * tick
}

// batchStats reads the store's heartbeat statements from its metrics: how many, their rows and
// their time in Postgres, summed.
func batchStats(reg *prometheus.Registry) (statements uint64, rows float64, took time.Duration) {
	families, _ := reg.Gather()
	for _, f := range families {
		if len(f.GetMetric()) == 0 {
			continue
		}
		h := f.GetMetric()[0].GetHistogram()
		switch f.GetName() {
		case "botpool_store_heartbeat_batch_size":
			statements, rows = h.GetSampleCount(), h.GetSampleSum()
		case "botpool_store_flush_duration_seconds":
			took = time.Duration(h.GetSampleSum() * float64(time.Second))
		}
	}
	return statements, rows, took
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// loadAverage is the machine's 1-minute load average, for reading noisy figures ("?" unknown).
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(raw)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// perBeat is d per beat, in microseconds.
func perBeat(d time.Duration, beats int) float64 {
	return float64(d.Microseconds()) / float64(max(beats, 1))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

// beatRates are the offered loads of the benchmark, in beats per second, lowest first.
var beatRates = []int{5_000, 10_000, 15_000, 20_000, 25_000}

// BenchmarkHeartbeatsIntoPostgres measures item 6 of issue 8: heartbeats through the bot API
// (HTTP on loopback, token auth from the cache) into the Postgres store. It offers rising loads
// and reports, for each, the rate carried and the latency bots saw; the sustained rate is the
// highest load carried with p99 within 25 ms. Target on this machine: at least 20,000 beats/s.
//
//	go test -run '^$' -bench Heartbeats -benchtime 1x ./botapi/
func BenchmarkHeartbeatsIntoPostgres(b *testing.B) {
	// 2500 slots keep every slot's rate (10/s at the highest load) under the API's per-slot
	// limit of 20/s, so the figures count acknowledged beats, not refusals.
	const bots, clients = 2500, 1250
	ctx := context.Background()
	pg := pgtest.StartT(b)
	reg := prometheus.NewRegistry()
	st, err := postgres.New(ctx, pg.NewDatabase(b), postgres.WithRegisterer(reg))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	ns := env.Namespace(b)
	fleet := newFleet(b, ns, bots)
	addr := serveBotAPI(b, Config{Cache: objCache, Client: env.Client, APIReader: env.Client, Liveness: st, Log: logr.Discard()})

	b.ResetTimer()
	var results []beatResult
	for range b.N {
		results = results[:0]
		for _, rate := range beatRates {
			load := beatLoad{bots: bots, clients: clients, interval: time.Duration(float64(time.Second) * bots / float64(rate)),
				warmup: time.Second, measure: 5 * time.Second}
			res := runBeats(addr, fleet, load, reg, pg.Port())
			results = append(results, res)
			if res.rate() < 0.8*load.offered() {
				break // saturated: a higher load cannot be carried either
			}
		}
	}
	b.StopTimer()

	// Every bot's beats are in Postgres, the last of them from the last load.
	uids := make([]types.UID, len(fleet))
	for i, f := range fleet {
		uids[i] = f.uid
	}
	beats, err := st.LastHeartbeats(ctx, uids)
	if err != nil {
		b.Fatal(err)
	}
	stale := 0
	for _, uid := range uids {
		if at, ok := beats[uid]; !ok || time.Since(at) > time.Minute {
			stale++
		}
	}

	best, failures := -1, 0
	for i, r := range results {
		failures += r.failures()
		if r.sustained() {
			best = i
		}
	}
	var w strings.Builder
	fmt.Fprintf(&w, "\nHeartbeats into Postgres through the bot API (go test -run '^$' -bench Heartbeats -benchtime 1x ./botapi/)\n")
	fmt.Fprintf(&w, "  %d bound bots on %d slots, %d keep-alive HTTP clients in this process; each load %s after %s of warm-up\n",
		bots, bots, clients, results[0].load.measure, results[0].load.warmup)
	fmt.Fprintf(&w, "  %9s %9s %8s %8s %8s %8s %7s %12s %12s %9s %8s\n", "offered/s", "carried/s", "p50", "p99", "p99.9", "max", "failed",
		"Go CPU/beat", "PG CPU/beat", "rows/stmt", "ms/stmt")
	for _, r := range results {
		perStmt, stmtTime := 0.0, time.Duration(0)
		if r.statements > 0 {
			perStmt, stmtTime = r.rows/float64(r.statements), r.stmtTime/time.Duration(r.statements)
		}
		fmt.Fprintf(&w, "  %9.0f %9.0f %8s %8s %8s %8s %7d %10.0fµs %10.0fµs %9.0f %8s\n", r.load.offered(), r.rate(),
			ms(r.quantile(0.5)), ms(r.quantile(0.99)), ms(r.quantile(0.999)), ms(r.quantile(1)), r.failures(),
			perBeat(r.cpu, r.beats), perBeat(r.pgCPU, r.beats), perStmt, ms(stmtTime))
	}
	sustained := 0.0
	if best >= 0 {
		sustained = results[best].rate()
	}
	fmt.Fprintf(&w, "  sustained with p99 ≤ %s: %.0f beats/s  [target ≥ %d/s: %s]\n", ms(beatTargetP99), sustained, beatTargetRate, verdict(sustained >= beatTargetRate))
	fmt.Fprintf(&w, "  failed answers (non-2xx or none): %d  [must be 0: %s]; %d of %d bots without a recent beat in Postgres\n",
		failures, verdict(failures == 0), stale, len(fleet))
	// What the CPU allows, whatever else the machine runs: its cores divided by the CPU a beat
	// costs (clients, API, store and Postgres) at the highest load.
	last := results[len(results)-1]
	perBeatCPU := last.cpu + last.pgCPU
	if last.beats > 0 && perBeatCPU > 0 {
		fmt.Fprintf(&w, "  CPU ceiling: %d cores ÷ %.0fµs per beat = %.0f beats/s at 100%% CPU, the clients included; load average %s during the run\n",
			runtime.NumCPU(), perBeat(perBeatCPU, last.beats), float64(runtime.NumCPU())*float64(last.beats)/perBeatCPU.Seconds(), loadAverage())
	}

	fmt.Print(w.String())
	b.ReportMetric(sustained, "beats/s")
	if best >= 0 {
		b.ReportMetric(float64(results[best].quantile(0.5).Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(results[best].quantile(0.99).Microseconds())/1000, "p99-ms")
	}
	b.ReportMetric(perBeat(last.cpu, last.beats), "go-cpu-us/beat")
	b.ReportMetric(perBeat(last.pgCPU, last.beats), "pg-cpu-us/beat")
	b.ReportMetric(float64(failures), "failed")
	if failures > 0 {
		b.Errorf("%d beats failed: the figures do not measure acknowledged beats", failures)
	}
	if stale > 0 {
		b.Errorf("%d of %d bots have no recent beat in Postgres", stale, len(fleet))
	}
}
