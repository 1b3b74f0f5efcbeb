package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify/sim"
)

// namespace is where the demo applies everything: the kubeconfig's default, so plain
// `kubectl get bots` finds the bots.
const namespace = "default"

// The bot image of the demo's pool; the simulator pulls nothing, but caches it by name.
const (
	botImage    = "ghcr.io/example/meeting-bot"
	botImageTag = "1.4.2"
)

// Simulated Coolify durations before --speed divides them: a warm start of a couple of seconds
// at the default speed, a cold pull of 14s (sim.DefaultColdPull is 7 minutes).
const (
	warmPull  = 45 * time.Second
	composeUp = 15 * time.Second
)

// run is the whole demo; everything it started is stopped and removed when it returns.
func run(ctx context.Context, o options, stdout io.Writer, tty bool) (err error) {
	out := printer{stdout}
	defer func() {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			err = nil // Ctrl-C before the end: a stop, not a failure
		}
	}()
	began := time.Now()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return errors.New("KUBEBUILDER_ASSETS is not set: run `make demo`, or KUBEBUILDER_ASSETS=$(hack/envtest.sh) go run ./cmd/demo")
	}
	if _, err := os.Stat(o.manager); err != nil {
		return fmt.Errorf("the operator binary %s: %w (run `make build`, or pass --manager)", o.manager, err)
	}
	st := &stack{}
	if st.dir, err = demoDir(o); err != nil {
		return err
	}
	if !o.keep {
		st.deferClose(func() error { return os.RemoveAll(st.dir) })
	}
	defer func() {
		if cerr := st.close(); cerr != nil {
			out.f("Cleanup: %v\n", cerr)
		}
		if !o.keep {
			out.f("Stopped everything and removed %s.\n", st.dir)
		}
	}()
	step := func(what string, f func() error) error {
		t := time.Now()
		out.f("%-52s", what+"…")
		if err := f(); err != nil {
			if ctx.Err() != nil {
				out.f(" interrupted\n")
			} else {
				out.f(" failed\n")
			}
			return err
		}
		out.f(" %s\n", seconds(time.Since(t)))
		return nil
	}
	out.f("botpool demo in %s\n", st.dir)
	out.f("Pool: standby %s (%s), maxSlots %d, minIdle %d; %d bots, faults %s\n", o.standby, standbyNote(o.standby),
		o.maxSlots, o.minIdle, o.bots, o.faults)
	servers := serverUUIDs(o.servers)
	if o.servers > 1 {
		out.f("Servers: %s\n", serversNote(o, servers))
	}
	if o.webhookURL != "" {
		signed := "unsigned"
		if o.webhookSecret != "" {
			signed = "signed with the key of Secret demo-webhook"
		}
		out.f("Webhooks: every bot's phases to %s, %s; the operator may reach loopback with them (--callback-allowed-cidrs=%s: a demo setting, unsafe in production)\n",
			o.webhookURL, signed, loopbackCIDRs)
	}

	kubectl := findKubectl(assets, o.buildKubectl, st)

	if err := step("Starting kube-apiserver and etcd", func() error { return st.startControlPlane(assets) }); err != nil {
		return err
	}
	var dsn string
	if err := step("Starting Postgres", func() (err error) { dsn, err = st.startPostgres(ctx); return err }); err != nil {
		return err
	}

	// The simulated bots live as long as the demo; they stop before the operator and Coolify.
	botsCtx, stopBots := context.WithCancel(context.Background())
	botLog, err := os.OpenFile(filepath.Join(st.dir, "bots.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		stopBots()
		return err
	}
	ctrs := newContainers(botsCtx, o.meetMin, o.meetMax, o.seed, botLog)
	fs := &faults{mode: o.faults, speed: o.speed, meetMin: o.meetMin}
	coolify := sim.Start(sim.New(sim.Config{
		Speed: o.speed, WarmPull: warmPull, ComposeUp: composeUp, RandSeed: o.seed,
		Hooks: sim.Hooks{
			OnStart: func(c sim.Container) { fs.onStart(c); ctrs.onStart(c) },
			OnStop:  func(c sim.Container) { fs.onStop(c); ctrs.onStop(c) },
		},
	}))
	fs.sim = coolify
	st.deferClose(func() error { coolify.Close(); return nil })
	st.deferClose(func() error { stopBots(); ctrs.wait(); return botLog.Close() })
	fixture := coolify.SeedDefault()
	seedServers(coolify, servers, o.coldImage)
	down := &outage{sim: coolify, server: servers[len(servers)-1], at: o.serverDownAt, lasts: o.serverDownFor}
	fs.down = down
	out.f("%-52s %s (×%g: cold pull %s, warm start %s)\n", "Coolify simulator", coolify.URL, o.speed,
		seconds(scaled(sim.DefaultColdPull+composeUp, o.speed)), seconds(scaled(warmPull+composeUp, o.speed)))

	rec := newRecorder()
	watchCtx, stopWatch := context.WithCancel(context.Background())
	st.deferClose(func() error { stopWatch(); return nil })
	if err := rec.watch(watchCtx, st.cfg, st.scheme, namespace); err != nil {
		return err
	}

	pool := poolValues{CoolifyURL: coolify.URL, CoolifyToken: fixture.Token, ProjectUUID: fixture.ProjectUUID,
		ServerUUID: fixture.ServerUUID, EnvironmentName: fixture.EnvironmentName, Image: botImage, ImageTag: botImageTag,
		MaxSlots: o.maxSlots, MinIdle: o.minIdle, Standby: o.standby, Speed: o.speed,
		WebhookURL: o.webhookURL, WebhookSecret: o.webhookSecret}
	if len(servers) > 1 {
		pool.Servers = servers
	}
	fs.image = botImage + ":" + botImageTag
	if err := step("Applying the Coolify Secret and the BotPool", func() error {
		doc, err := render(st.dir, "pool", pool)
		if err != nil {
			return err
		}
		return apply(ctx, st.client, st.scheme, namespace, doc)
	}); err != nil {
		return err
	}
	var ports managerPorts
	if err := step("Starting the operator ("+o.manager+")", func() (err error) {
		ports, err = st.startManager(ctx, dsn, o)
		return err
	}); err != nil {
		return err
	}
	out.f("  operator pid %s, bot API http://%s, metrics http://%s/metrics, log %s\n\n", st.pid(), ports.botAPI, ports.metrics, st.managerLog)
	fs.start()

	loop := &loop{o: o, rec: rec, faults: fs, outage: down, st: st, view: &view{out: stdout, tty: tty, start: began, maxSlots: o.maxSlots,
		standby: o.standby == string(v1.StandbyRunning), servers: o.servers > 1}}
	if err := loop.warmUp(ctx); err != nil {
		return err
	}
	burstAt := time.Now()
	down.armed(burstAt)
	if err := loop.applyBurst(ctx, burstAt); err != nil {
		return err
	}
	if err := loop.untilDone(ctx); err != nil {
		return err
	}
	took := time.Since(burstAt)
	if err := loop.untilServerBack(ctx); err != nil {
		return err
	}
	loop.view.forget()

	snapBots, snapSlots, snapPool := rec.snapshot()
	rp := newReport(snapBots, snapSlots, fs, ctrs.failures(), burstAt, o.standby, warmServers(servers, o.coldImage),
		down.downWindow())
	rp.took = took // the bots' run, without the wait for the server to come back
	if o.servers > 1 {
		deps := coolify.Deployments()
		rp.servers = serverReport(rp.rows, rec.placements(), deps, servers)
		rp.outage = outageReport(rp.rows, deps, snapPool, down, burstAt)
	}
	rp.operatorErrors, rp.operatorPanics = countLog(st.managerLog)
	rp.print(stdout)
	var summary strings.Builder
	rp.print(&summary)
	if err := os.WriteFile(filepath.Join(st.dir, "summary.txt"), []byte(summary.String()), 0o644); err != nil {
		return err
	}
	printNext(out, st, kubectl)
	if o.exit {
		return nil
	}
	if o.keep {
		out.f("\nPress Ctrl-C to stop everything (%s is kept).\n", st.dir)
	} else {
		out.f("\nPress Ctrl-C to stop everything and remove %s.\n", st.dir)
	}
	<-ctx.Done()
	return nil
}

// serversNote says, in the header, which servers the pool spreads over and what happens to them.
func serversNote(o options, servers []string) string {
	cache := "the bot image cached on each"
	if o.coldImage {
		cache = "no image cached: each server's first deployment pulls it"
	}
	note := fmt.Sprintf("%s (%s)", strings.Join(servers, ", "), cache)
	switch {
	case o.serverDownAt > 0 && o.serverDownFor > 0:
		note += fmt.Sprintf("; %s goes down %s after the burst, back %s later", servers[len(servers)-1], o.serverDownAt, o.serverDownFor)
	case o.serverDownAt > 0:
		note += fmt.Sprintf("; %s goes down %s after the burst, for good", servers[len(servers)-1], o.serverDownAt)
	}
	return note
}

// standbyNote says what the pool's standby mode means for a bot's start.
func standbyNote(mode string) string {
	if mode == string(v1.StandbyRunning) {
		return "free slots keep a container waiting for its binding: a start needs no Coolify request"
	}
	return "free slots have no container: every start is a Coolify deployment"
}

func scaled(d time.Duration, speed float64) time.Duration {
	return time.Duration(float64(d) / speed)
}

// demoDir makes the demo's directory: the one given, which must be new or empty since it is
// removed at the end, or a new temporary one.
func demoDir(o options) (string, error) {
	if o.dir == "" {
		return os.MkdirTemp("", "botpool-demo-")
	}
	if entries, err := os.ReadDir(o.dir); err == nil && len(entries) > 0 {
		return "", fmt.Errorf("--dir %s is not empty: the demo removes its directory when it stops; name a new one", o.dir)
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return "", err
	}
	return filepath.Abs(o.dir)
}

// printNext tells how to look at what keeps running.
func printNext(out printer, st *stack, kubectl *kubectlInfo) {
	out.f("\nThe control plane, the operator and the simulator keep running. Look around:\n\n")
	out.f("  export KUBECONFIG=%s\n", st.kubeconfig)
	out.f("  %s get bots,botpoolslots,botpools\n", kubectl.command())
	if note := kubectl.note(); note != "" {
		out.f("  (%s)\n", note)
	}
	out.f("\n  operator log: %s   bot containers: %s\n", st.managerLog, filepath.Join(st.dir, "bots.log"))
}

// loop ticks once a second: it redraws the view and arms the faults.
type loop struct {
	o      options
	rec    *recorder
	faults *faults
	outage *outage
	st     *stack
	view   *view
	note   string
}

func (l *loop) tick() frame {
	if what := l.outage.tick(time.Now()); what != "" {
		l.note = what
	}
	bots, slots, pool := l.rec.snapshot()
	l.faults.tick(bots)
	requests, server, tooMany := l.faults.coolifyErrors()
	f := frame{bots: bots, slots: slots, pool: pool, note: l.note,
		status: fmt.Sprintf("Coolify %d requests, %d answered 5xx, %d answered 429 · %s", requests, server, tooMany, l.faults.status())}
	if l.outage.at > 0 {
		f.status += " · " + outageStatus(l.outage, pool, l.view.start)
	}
	l.view.draw(f)
	return f
}

// every runs tick each second until done says so, ctx ends, the operator dies or time is up.
func (l *loop) every(ctx context.Context, limit time.Duration, what string, done func(frame) bool) error {
	deadline := time.Now().Add(limit)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if done(l.tick()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.st.exited:
			return fmt.Errorf("the operator exited; the end of %s:\n%s", l.st.managerLog, tail(l.st.managerLog, 20))
		case <-t.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s took longer than %s; see %s", what, limit, l.st.managerLog)
		}
	}
}

// warmUp waits until the pool has its minIdle slots ready and its image pulled, so the burst
// finds warm slots.
func (l *loop) warmUp(ctx context.Context) error {
	l.note = fmt.Sprintf("warming up: the pool creates its %d minIdle slots", l.o.minIdle)
	if l.o.standby == string(v1.StandbyRunning) {
		l.note += " and their standby containers"
	} else {
		l.note += " and pulls its image"
	}
	var pool v1.BotPool
	return l.every(ctx, 2*time.Minute, "warming up the pool", func(f frame) bool {
		if err := l.st.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "meet"}, &pool); err != nil {
			return false
		}
		if l.o.standby == string(v1.StandbyRunning) {
			return readyStandby(f) >= l.o.minIdle // minIdle counts Ready containers
		}
		// Ready: the pool pulled its image on its servers (its pre-pull), so no bot of the
		// burst waits for a cold pull.
		_, slots, _ := counts(f)
		return slots[v1.SlotIdle] >= l.o.minIdle && meta.IsStatusConditionTrue(pool.Status.Conditions, v1.ConditionReady)
	})
}

// applyBurst applies the burst of bots (and the scheduled one), each from manifests/bot.yaml.
func (l *loop) applyBurst(ctx context.Context, now time.Time) error {
	bots := burst(l.o.bots, l.o.scheduleIn, rand.New(rand.NewPCG(l.o.seed, 0xb075)), now)
	for _, b := range bots {
		doc, err := render(l.st.dir, "bot", b)
		if err != nil {
			return err
		}
		l.rec.created(b.Name, b.Priority, b.StartTime != "", time.Now())
		if err := apply(ctx, l.st.client, l.st.scheme, namespace, doc); err != nil {
			return err
		}
	}
	l.note = fmt.Sprintf("%d bots applied", len(bots))
	return nil
}

// untilDone waits until every bot is Done or Fatal.
func (l *loop) untilDone(ctx context.Context) error {
	return l.every(ctx, l.o.timeout, "running the bots", func(f frame) bool {
		for _, b := range f.bots {
			if !b.terminal() {
				return false
			}
		}
		return len(f.bots) > 0
	})
}

// serverBackWait bounds the wait, after the bots finished, for the server taken down to be
// back and the pool to see it: the operator reads the servers once a minute.
const serverBackWait = 2 * time.Minute

// untilServerBack waits, when --server-down-for brings the server back, until it is back and
// the pool's status shows it healthy again (or serverBackWait after it came back, or after the
// pool saw it out if that was later): the point where its free slots are offered again. An
// outage the pool never noticed, or one that never came, needs no wait.
func (l *loop) untilServerBack(ctx context.Context) error {
	o := l.outage
	if down, _ := o.window(); o.lasts <= 0 || down.IsZero() {
		return nil
	}
	l.note = fmt.Sprintf("every bot finished; waiting for the pool to see %s back (it reads the servers once a minute)", o.server)
	return l.every(ctx, o.lasts+serverBackWait+time.Minute, "waiting for the server to come back", func(f frame) bool {
		down, up := o.window()
		if up.IsZero() {
			return false
		}
		out, back := f.pool.sawOutage(o.server, down, up)
		if out.IsZero() || !back.IsZero() {
			return true
		}
		return time.Since(latest(up, out)) > serverBackWait
	})
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// kubectlInfo says how the person can run kubectl against the demo.
type kubectlInfo struct {
	path     string
	building *exec.Cmd
	log      string
}

// findKubectl looks for kubectl in the envtest cache, then on PATH; when neither has one it
// builds it into the cache in the background (a few minutes), so the command printed after
// the summary works by the time someone types it.
func findKubectl(assets string, build bool, st *stack) *kubectlInfo {
	cached := filepath.Join(assets, "kubectl")
	if _, err := os.Stat(cached); err == nil {
		return &kubectlInfo{path: cached}
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		return &kubectlInfo{path: p}
	}
	k := &kubectlInfo{path: cached}
	script := "hack/envtest.sh"
	if _, err := os.Stat(script); err != nil || !build {
		return k
	}
	k.log = filepath.Join(os.TempDir(), "botpool-kubectl-build.log")
	logFile, err := os.Create(k.log)
	if err != nil {
		return k
	}
	buildCtx, stop := context.WithCancel(context.Background())
	cmd := exec.CommandContext(buildCtx, script, "--kubectl")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A group of its own: the demo's cleanup stops the script and the go build under it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	if err := cmd.Start(); err != nil {
		stop()
		_ = logFile.Close()
		return k
	}
	k.building = cmd
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logFile.Close(); close(done) }()
	// The build publishes kubectl atomically, so stopping it half-way leaves nothing broken.
	st.deferClose(func() error {
		stop()
		<-done
		return nil
	})
	return k
}

func (k *kubectlInfo) command() string { return k.path }

func (k *kubectlInfo) note() string {
	if k.building == nil {
		if _, err := os.Stat(k.path); err != nil {
			return "no kubectl found; build one with: hack/envtest.sh --kubectl"
		}
		return ""
	}
	if _, err := os.Stat(k.path); err == nil {
		return ""
	}
	return "kubectl is still being built in the background (a few minutes the first time); progress in " + k.log
}
