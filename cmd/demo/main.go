// Command demo runs the whole botpool system on one machine, without Docker or a cluster: a
// local control plane (kube-apiserver and etcd from the envtest cache), a throwaway Postgres,
// the Coolify simulator with time-scaled pulls and a few injected faults, and the real operator
// binary with its bot API. Simulated bots run in the simulator's containers and speak the bot
// API. The demo applies a BotPool and a burst of Bots, shows their progress live, prints a
// summary, and keeps everything running for kubectl until Ctrl-C, which removes it all.
//
//	make demo                     # or:
//	KUBEBUILDER_ASSETS=$(hack/envtest.sh) go run ./cmd/demo --manager bin/manager
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// options are the demo's flags.
type options struct {
	bots         int
	maxSlots     int
	minIdle      int
	speed        float64
	meetMin      time.Duration
	meetMax      time.Duration
	scheduleIn   time.Duration
	scheduleLead time.Duration
	faults       string
	standby      string
	exit         bool
	dir          string
	keep         bool
	manager      string
	seed         uint64
	buildKubectl bool
	timeout      time.Duration
	// servers is how many simulated Coolify servers the pool spreads over (1: serverUUID, as
	// always; more: spec.coolify.servers). coldImage: they start without the bot image.
	servers       int
	coldImage     bool
	serverDownAt  time.Duration // after the burst, the last server goes unreachable; 0: never
	serverDownFor time.Duration // and comes back this much later; 0: it stays down
	// webhookURL receives every demo bot's phases (the pool's webhookDefaults), signed with
	// webhookSecret when set; the operator may then reach loopback with them (managerArgs).
	webhookURL    string
	webhookSecret string
}

// Bounds of --servers: the demo seeds srv-1 … srv-3.
const maxServers = 3

// slotsPerServer is --max-slots' default per server: 5 on one server, as the demo always had.
const slotsPerServer = 5

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.bots, "bots", 16, "Bots in the burst (plus one scheduled bot, see --schedule-in).")
	fs.IntVar(&o.maxSlots, "max-slots", slotsPerServer, "The pool's maxSlots: fewer than bots, so the burst queues (default 5 per server of --servers).")
	fs.IntVar(&o.minIdle, "min-idle", 2, "The pool's minIdle: slots kept warm before the burst arrives.")
	fs.Float64Var(&o.speed, "speed", 30, "How much faster than a real Coolify the simulator runs: 30 turns a 7-minute image pull into 14s.")
	fs.DurationVar(&o.meetMin, "meeting-min", 10*time.Second, "Shortest simulated meeting.")
	fs.DurationVar(&o.meetMax, "meeting-max", 40*time.Second, "Longest simulated meeting.")
	fs.DurationVar(&o.scheduleIn, "schedule-in", 40*time.Second, "Start time of the scheduled bot, from the burst; 0 leaves it out.")
	fs.DurationVar(&o.scheduleLead, "schedule-lead", 10*time.Second, "The operator's --schedule-lead: how early a scheduled bot joins the queue.")
	fs.StringVar(&o.faults, "faults", faultsAll, "Injected Coolify faults: all (transient errors, one failed pull, one crash), transient (only errors the operator retries), none.")
	fs.StringVar(&o.standby, "standby", string(v1.StandbyStopped), "The pool's spec.standby: Stopped (a free slot has no container; every start is a Coolify deployment) or Running (a free slot keeps a container waiting for its binding; a bot starts with no Coolify request, and its slot gets a fresh container after it).")
	fs.BoolVar(&o.exit, "exit", false, "Stop and clean up after the summary instead of waiting for Ctrl-C (for CI).")
	fs.StringVar(&o.dir, "dir", "", "Directory for the kubeconfig, logs and applied manifests; default a new temporary one. Removed at the end unless --keep.")
	fs.BoolVar(&o.keep, "keep", false, "Keep the demo directory (logs, manifests) after stopping.")
	fs.StringVar(&o.manager, "manager", "bin/manager", "The operator binary (make build).")
	fs.Uint64Var(&o.seed, "seed", 1, "Seed of meeting lengths, meeting codes and fault timing.")
	fs.BoolVar(&o.buildKubectl, "build-kubectl", true, "Build kubectl into the envtest cache in the background when it is missing (hack/envtest.sh --kubectl).")
	fs.DurationVar(&o.timeout, "timeout", 15*time.Minute, "Give up when the bots have not all finished by then.")
	fs.IntVar(&o.servers, "servers", 1, "Simulated Coolify servers the pool spreads over, 1 to 3: one is the pool's serverUUID, several its spec.coolify.servers (srv-1, srv-2, srv-3).")
	fs.BoolVar(&o.coldImage, "cold-image", true, "The servers start without the bot image, so each one's first deployment pulls it (default true with one server, false with several).")
	fs.DurationVar(&o.serverDownAt, "server-down-at", 0, "Take the last server down (unreachable in Coolify) this long after the burst; 0 never. Needs --servers 2 or 3.")
	fs.DurationVar(&o.serverDownFor, "server-down-for", 0, "Bring the server taken down back after this long; 0 leaves it down. Needs --server-down-at.")
	fs.StringVar(&o.webhookURL, "webhook-url", "", "POST every demo bot's phases to this URL (the pool's spec.webhookDefaults, events EveryPhase), e.g. a receiver on this machine at http://127.0.0.1:3000/hooks. "+
		"The operator then runs with --callback-allowed-cidrs="+loopbackCIDRs+", so any Bot's callbacks and webhooks may reach this machine's loopback services: a demo setting, unsafe in production.")
	fs.StringVar(&o.webhookSecret, "webhook-secret", "", "Sign the --webhook-url messages with this key (whsec_ followed by base64, or raw bytes), kept in the Secret demo-webhook; empty sends them unsigned.")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	// Defaults that follow --servers unless given: room for 5 slots on each server, and a warm
	// image cache on several servers, so the outage is not mixed up with first pulls.
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["max-slots"] && o.servers > 1 {
		o.maxSlots = slotsPerServer * o.servers
	}
	if !set["cold-image"] {
		o.coldImage = o.servers <= 1
	}
	errs := validateServers(o)
	if o.bots < 1 {
		errs = append(errs, fmt.Errorf("--bots must be at least 1, got %d", o.bots))
	}
	if o.maxSlots < 1 || o.minIdle < 0 || o.minIdle > o.maxSlots {
		errs = append(errs, fmt.Errorf("want 0 <= --min-idle (%d) <= --max-slots (%d), and --max-slots >= 1", o.minIdle, o.maxSlots))
	}
	if o.speed <= 0 {
		errs = append(errs, fmt.Errorf("--speed must be positive, got %v", o.speed))
	}
	if o.meetMin <= 0 || o.meetMax < o.meetMin {
		errs = append(errs, fmt.Errorf("want 0 < --meeting-min (%s) <= --meeting-max (%s)", o.meetMin, o.meetMax))
	}
	if o.faults != faultsAll && o.faults != faultsTransient && o.faults != faultsNone {
		errs = append(errs, fmt.Errorf("--faults must be %s, %s or %s, got %q", faultsAll, faultsTransient, faultsNone, o.faults))
	}
	if o.standby != string(v1.StandbyStopped) && o.standby != string(v1.StandbyRunning) {
		errs = append(errs, fmt.Errorf("--standby must be %s or %s (the pool's spec.standby), got %q", v1.StandbyStopped, v1.StandbyRunning, o.standby))
	}
	if o.scheduleIn < 0 || o.scheduleLead < 0 {
		errs = append(errs, errors.New("--schedule-in and --schedule-lead must not be negative"))
	}
	errs = append(errs, validateWebhook(o)...)
	return o, errors.Join(errs...)
}

// validateWebhook checks --webhook-url and --webhook-secret.
func validateWebhook(o options) []error {
	var errs []error
	if o.webhookURL != "" {
		if u, err := url.Parse(o.webhookURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--webhook-url %q: want an http:// or https:// URL, e.g. http://127.0.0.1:3000/hooks", o.webhookURL))
		}
	}
	if o.webhookSecret != "" && o.webhookURL == "" {
		errs = append(errs, errors.New("--webhook-secret needs --webhook-url: it signs the messages sent there"))
	}
	return errs
}

// validateServers checks --servers and the outage flags.
func validateServers(o options) []error {
	var errs []error
	if o.servers < 1 || o.servers > maxServers {
		errs = append(errs, fmt.Errorf("--servers must be 1 to %d, got %d", maxServers, o.servers))
	}
	if o.serverDownAt < 0 || o.serverDownFor < 0 {
		errs = append(errs, errors.New("--server-down-at and --server-down-for must not be negative"))
	}
	if o.serverDownAt > 0 && o.servers < 2 {
		errs = append(errs, fmt.Errorf("--server-down-at needs --servers 2 or 3: the pool must have a server left when one goes down (got --servers %d)", o.servers))
	}
	if o.serverDownFor > 0 && o.serverDownAt == 0 {
		errs = append(errs, errors.New("--server-down-for needs --server-down-at: it says when the server taken down comes back"))
	}
	return errs
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// The demo's own Kubernetes clients have nothing to say on the terminal; the operator's
	// logs go to manager.log.
	ctrllog.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	// The first Ctrl-C (or SIGTERM) stops the demo and cleans up; later ones only say that
	// the cleanup runs, so a second impatient Ctrl-C cannot leave processes behind.
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-signals
		fmt.Fprintln(os.Stderr, "\nStopping: the operator, the simulated bots, the control plane and Postgres…")
		cancel()
		for range signals {
			fmt.Fprintln(os.Stderr, "Still cleaning up; it takes a few seconds.")
		}
	}()
	err = run(ctx, o, os.Stdout, isTerminal(os.Stdout))
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb"
}
