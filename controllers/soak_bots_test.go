package controllers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"botpool.dev/botpool/botapi/botclient"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/simbot"
)

// soakBots runs a simulated bot (internal/simbot, the bot API only) in every container the
// soak's simulator starts, and stops it with its container: a crash, a stop or a redeploy ends
// the bot's process as it would end a real one. It records, on the fake clock, when each bot's
// heartbeat was last acknowledged, which serves two ends: the soak holds the clock while a
// live bot has not beaten for a while (the bots run in real time, the operator's clock jumps
// an interval per step), and a bot the operator failed for silence can be checked against
// the beats it really sent.
//
// The same simulated bot serves both kinds of pool. On a standby pool (spec.standby Running)
// a free slot's container starts with no bot bound: simbot long-polls its config
// (botclient.WaitForBinding) until the binding comes, claims it, runs the meeting and exits,
// as a standby image does. The soak records what every container asked for and received (its
// slot credential, its asks, the bot and credential of its config), which the invariant-12
// checks read (soak_invariants_test.go).
type soakBots struct {
	ctx       context.Context
	cancel    context.CancelFunc
	transport http.RoundTripper
	// meeting picks a run's meeting length (real time) and join delay.
	meeting func() (length, join time.Duration)

	mu       sync.Mutex
	runs     map[string]*botRun // by application uuid: the container running now
	lastStop map[string]uint64  // by application uuid: Seq of the latest stop seen
	beats    map[string]time.Time
	crashes  map[string]int       // by stop reason: "crashed", "crash-loop", "lost" (a rebooted server)
	outcomes map[string]int       // how runs ended
	dead     map[string]time.Time // application → when its bot process ended without the operator (fake clock)
	deaths   []string             // why, the first few
	stalls   int
	restarts int // containers started over a running one: a second deployment
	// restartLog says which, when and over which bot.
	restartLog []string
	overEnded  int             // containers started over one whose bot had ended (its stop lost)
	restartAt  []sim.Container // the application and time of each restart
	wg         sync.WaitGroup

	// What the containers were given (invariant 12).
	latest   map[string]*botRun           // by application uuid: the last container started, running or not
	servedBy map[string]*botRun           // by bot: the container that received its configuration
	spent    map[string]map[string]string // by application uuid: slot tokens of its containers that received a bot → that bot
	creds    map[string]string            // binding credential handed out → its bot
	standby  int                          // containers that waited for a binding (a config answered 404 at its deadline)
	breaches []string                     // invariant 12 broken, as the containers saw it; drained by takeBreaches
	lost     map[string][]time.Time       // by application uuid: when a container of it crashed, died or fell behind the clock (fake clock)
}

// botRun is one container's bot process.
type botRun struct {
	seq     uint64
	cancel  context.CancelFunc
	started time.Time // fake clock: the container's start
	app     string
	bot     string // known from the first request that names it
	stalled bool   // the clock stopped waiting for it (see hold)
	done    bool

	token     string    // the slot credential in its environment
	asked     time.Time // fake clock: when its last config request left; zero before the first
	askedReal time.Time // real time of its first config request
	free      bool      // a config request waited and was answered "no bot yet": a standby container
	given     string    // the bot of the configuration it received; empty until then
	cred      string    // the binding credential that came with it
	died      string    // why its bot process ended on its own, if it did
	diedAt    time.Time // fake clock: when
}

func newSoakBots(meeting func() (time.Duration, time.Duration)) *soakBots {
	ctx, cancel := context.WithCancel(context.Background())
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	return &soakBots{ctx: ctx, cancel: cancel, transport: tr, meeting: meeting,
		runs: map[string]*botRun{}, lastStop: map[string]uint64{}, beats: map[string]time.Time{},
		crashes: map[string]int{}, outcomes: map[string]int{}, dead: map[string]time.Time{},
		latest: map[string]*botRun{}, lost: map[string][]time.Time{}, servedBy: map[string]*botRun{}, spent: map[string]map[string]string{}, creds: map[string]string{}}
}

// hooks are the simulator's container hooks. Hooks of concurrent advances may arrive out of
// order: Container.Seq says which start or stop came last.
func (b *soakBots) hooks() sim.Hooks {
	return sim.Hooks{OnStart: b.start, OnStop: b.stop}
}

func (b *soakBots) start(c sim.Container) {
	if simbot.IsPrePull(c) {
		return // a pool's image pre-pull: no slot, no bot
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ctx, cancel := context.WithCancel(b.ctx)
	run := &botRun{seq: c.Seq, cancel: cancel, started: c.At, app: c.AppUUID, token: c.Env["BOTPOOL_SLOT_TOKEN"]}
	b.freshContainer(run)
	prev := b.latest[c.AppUUID]
	if prev == nil || prev.seq < c.Seq {
		b.latest[c.AppUUID] = run
	}
	if b.ctx.Err() != nil || b.lastStop[c.AppUUID] > c.Seq {
		run.done = true
		cancel()
		return // stopped already
	}
	if old := b.runs[c.AppUUID]; old != nil {
		if old.seq > c.Seq {
			run.done = true
			cancel()
			return // a newer container runs already
		}
		old.cancel()
	}
	// A second deployment over the container of a bot restarts the bot mid-call. A fresh
	// container replacing one that never received a bot (a standby container that stopped
	// asking) is no such restart, nor is one replacing the container of a bot that ended: its
	// slot's stop was lost (Coolify drops stops to a server it cannot reach), and the next bot
	// is deployed over what is left.
	switch {
	case c.Reason != "redeployed" || prev == nil || prev.given == "":
	case prev.done:
		b.overEnded++
	default:
		b.restarts++
		b.restartLog = append(b.restartLog, fmt.Sprintf("container %d of %s (%s, server %s) at %s over container %d of bot %s",
			c.Seq, c.AppName, c.AppUUID, c.ServerUUID, c.At.Format(time.TimeOnly), prev.seq, prev.given))
		b.restartAt = append(b.restartAt, sim.Container{AppUUID: c.AppUUID, At: c.At})
	}
	delete(b.dead, c.AppUUID)
	b.runs[c.AppUUID] = run
	length, join := b.meeting()
	behaviour := simbot.Behaviour{
		MeetingLength: length, JoinDelay: join,
		// Faster than the bot API's per-slot limit (20/s) would allow is pointless; this is
		// about one beat per step of the clock.
		HeartbeatEvery: 60 * time.Millisecond, PollEvery: 40 * time.Millisecond, Retries: 10,
		HTTPClient: &http.Client{Transport: beatRecorder{bots: b, run: run, next: b.transport}, Timeout: 10 * time.Second},
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		res, err := simbot.Run(ctx, c, behaviour)
		b.finish(run, res, err, ctx.Err() != nil)
	}()
}

func (b *soakBots) stop(c sim.Container) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.Seq > b.lastStop[c.AppUUID] {
		b.lastStop[c.AppUUID] = c.Seq
	}
	run := b.runs[c.AppUUID]
	if run == nil || run.seq > c.Seq {
		return
	}
	run.cancel()
	delete(b.runs, c.AppUUID)
	if c.Reason == "crashed" || c.Reason == "crash-loop" || c.Reason == "lost" {
		// The container lives on (crash-looping) or is gone (crashed, or lost with its
		// rebooted server), but the bot is: only its silence tells the operator.
		b.crashes[c.Reason]++
		b.dead[c.AppUUID] = c.At
		b.lost[c.AppUUID] = append(b.lost[c.AppUUID], c.At)
	}
}

func (b *soakBots) finish(run *botRun, res simbot.Result, err error, stopped bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	run.done = true
	switch {
	case stopped:
		b.outcomes["stopped with its container"]++
	case err != nil:
		// The bot's process died on its own: its container runs on without it, and only the
		// heartbeat timeout can tell. Remember why, to explain the bot's end.
		b.outcomes["died: "+errorClass(err)]++
		run.died, run.diedAt = err.Error(), clk.Now()
		b.dead[run.app] = clk.Now()
		b.lost[run.app] = append(b.lost[run.app], clk.Now())
		if len(b.deaths) < 5 {
			b.deaths = append(b.deaths, fmt.Sprintf("%s: %v", run.bot, err))
		}
	default:
		b.outcomes[string(res.Outcome)]++
	}
}

// errorClass is what an error says before its details ("heartbeat", "reporting InCall"), for
// counting.
func errorClass(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, ": "); i > 0 {
		return msg[:i]
	}
	return msg
}

// named records that a run serves bot; beat records an acknowledged heartbeat of it.
func (b *soakBots) named(run *botRun, bot string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reportsFor(run, bot)
	run.bot = bot
}

func (b *soakBots) beat(run *botRun, bot string) {
	now := clk.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reportsFor(run, bot)
	run.bot, run.stalled = bot, false
	if now.After(b.beats[bot]) {
		b.beats[bot] = now
	}
}

// lastBeat is when bot's heartbeat was last acknowledged (fake clock); zero when never.
func (b *soakBots) lastBeat(bot string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.beats[bot]
}

// deadSince says when the bot process of app's container ended without the operator (a
// crash, or the process gave up), if it did and no container started since.
func (b *soakBots) deadSince(app string) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	at, ok := b.dead[app]
	return at, ok
}

// live reports whether the container of app runs a bot process that has not ended (bot: the
// bot it serves, when it said).
func (b *soakBots) live(app string) (bot string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	run := b.runs[app]
	if run == nil || run.done {
		return "", false
	}
	return run.bot, true
}

// soakAskWithin is how recent (simulated time) the last ask of a container that waits for its
// binding must be before the clock moves on: three steps, so an ask is at most four (60s) old
// when a slot looks at it, within the operator's ask window of 75s. A container's long-poll
// waits 30s (two steps), so the clock waits only for a re-ask that took more than two steps.
const soakAskWithin = 3 * soakInterval

// hold waits, in real time and up to limit, until every running bot has been acknowledged a
// heartbeat within `within` of simulated time (or, before its first, since its container
// started), and every container still waiting for a bot asked for one within soakAskWithin. The operator's clock must not outrun a live bot: a step of the fake clock is an
// interval, the bot beats every few real milliseconds, and a slow moment of the machine would
// otherwise look like minutes of silence. A bot still silent after limit is let go (counted
// as a stall) until it beats again.
func (b *soakBots) hold(within, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for {
		now := clk.Now()
		b.mu.Lock()
		var lagging []*botRun
		for _, run := range b.runs {
			if run.done || run.stalled {
				continue
			}
			last, limit := run.started, within
			if run.bot == "" {
				// Not started on a bot yet: a standby container waiting for its binding. Its asks
				// keep its slot Ready (the ask window is 75s) and must not look older than they
				// are: it asks again the moment a long-poll ends.
				if run.asked.After(last) {
					last = run.asked
				}
				limit = min(within, soakAskWithin)
			} else if t := b.beats[run.bot]; t.After(last) {
				last = t
			}
			if now.Sub(last) > limit {
				lagging = append(lagging, run)
			}
		}
		if len(lagging) > 0 && time.Now().After(deadline) {
			for _, run := range lagging {
				run.stalled = true
				b.lost[run.app] = append(b.lost[run.app], now)
			}
			b.stalls += len(lagging)
			lagging = nil
		}
		b.mu.Unlock()
		if len(lagging) == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lostBetween reports whether a container of app crashed, died or fell behind the clock
// between from and to (fake clock).
func (b *soakBots) lostBetween(app string, from, to time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, at := range b.lost[app] {
		if !at.Before(from) && !at.After(to) {
			return true
		}
	}
	return false
}

// redeployed counts the containers started over a running one: a second deployment for one
// bot, which restarts it mid-call.
func (b *soakBots) redeployed() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.restarts
}

// restartsSeen describes the containers started over a running one, with the deployments
// of their applications in the minutes before (what the slot asked of Coolify).
func (b *soakBots) restartsSeen(deps []sim.DeploymentInfo) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	parts := make([]string, 0, len(b.restartLog))
	for i, line := range b.restartLog {
		at := b.restartAt[i]
		var seen []string
		for _, d := range deps {
			if d.AppUUID == at.AppUUID && !d.Created.Before(at.At.Add(-5*time.Minute)) && !d.Created.After(at.At) {
				seen = append(seen, fmt.Sprintf("%s created %s %s", d.UUID, d.Created.Format(time.TimeOnly), d.Status))
			}
		}
		parts = append(parts, line+" (deployments of the application in the 5 minutes before: "+strings.Join(seen, ", ")+")")
	}
	return strings.Join(parts, "; ")
}

// close ends every bot process and waits for them.
func (b *soakBots) close() {
	b.mu.Lock()
	b.cancel() // under the lock: no run starts after this
	b.mu.Unlock()
	b.wg.Wait()
}

// summary describes how the bot processes ended.
func (b *soakBots) summary() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	keys := make([]string, 0, len(b.outcomes))
	for k := range b.outcomes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, b.outcomes[k]))
	}
	return fmt.Sprintf("bot processes: %s; containers crashed %d, crash-looped %d, lost with a rebooted server %d, redeployed while running %d, deployed over one whose bot had ended (a stop lost) %d, waited for a binding %d; configurations received %d; clock holds given up %d; deaths: %s",
		strings.Join(parts, ", "), b.crashes["crashed"], b.crashes["crash-loop"], b.crashes["lost"], b.restarts, b.overEnded, b.standby, len(b.servedBy), b.stalls, strings.Join(b.deaths, "; "))
}

// beatRecorder notes the bot API's answers that matter to the soak: which bot a container
// serves, and each acknowledged heartbeat.
type beatRecorder struct {
	bots *soakBots
	run  *botRun
	next http.RoundTripper
}

func (r beatRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	// /v1/slots/{uuid}/config
	if parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/"); req.Method == http.MethodGet && len(parts) == 4 && parts[1] == "slots" && parts[3] == "config" {
		return r.config(req)
	}
	resp, err := r.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	// /v1/bots/{name}/heartbeat or /v1/bots/{name}/status
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	if len(parts) == 4 && parts[1] == "bots" {
		if parts[3] == "heartbeat" {
			r.bots.beat(r.run, parts[2])
		} else {
			r.bots.named(r.run, parts[2])
		}
	}
	return resp, nil
}

// config sends a container's config request and records what it asked and received. The
// container asks again at once when its long-poll ends without a bot (404) or the bot API is
// away (no answer, 503 while the manager restarts): botclient pauses a second or backs off
// for up to 5 s there, which is nothing in real time but minutes of the soak's clock, and a
// Ready slot whose container looked silent that long would be Lost for the soak's haste, not
// the container's.
func (r beatRecorder) config(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	for {
		r.bots.asking(r.run)
		resp, err := r.next.RoundTrip(req)
		switch {
		case ctx.Err() != nil:
			return resp, err
		case err != nil, resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusNotFound:
			if resp != nil {
				if resp.StatusCode == http.StatusNotFound {
					r.bots.waitedFree(r.run)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			if err != nil || resp.StatusCode != http.StatusNotFound {
				if sleepErr := simSleep(ctx, 20*time.Millisecond); sleepErr != nil {
					return nil, sleepErr
				}
			}
			continue
		case resp.StatusCode == http.StatusOK:
			body, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				return nil, err
			}
			var cfg botclient.Config
			if json.Unmarshal(body, &cfg) == nil && cfg.Bot != "" {
				r.bots.given(r.run, cfg.Bot, cfg.Credential)
			}
			resp.Body = io.NopCloser(bytes.NewReader(body))
		}
		return resp, err
	}
}

func simSleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// asking records that run sends a config request: on a standby pool, an ask for work.
func (b *soakBots) asking(run *botRun) {
	now := clk.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	run.asked, run.stalled = now, false
	if run.askedReal.IsZero() {
		run.askedReal = time.Now()
	}
}

// waitedFree records that a config request of run waited and no bot came: its slot is free.
func (b *soakBots) waitedFree(run *botRun) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !run.free {
		b.standby++
	}
	run.free = true
}

// latestRun is the last container started for app, running or not.
func (b *soakBots) latestRun(app string) (botRun, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	run := b.latest[app]
	if run == nil {
		return botRun{}, false
	}
	return *run, true
}

// servedRun is the container that received bot's configuration.
func (b *soakBots) servedRun(bot string) (botRun, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	run := b.servedBy[bot]
	if run == nil {
		return botRun{}, false
	}
	return *run, true
}
