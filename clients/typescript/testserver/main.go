// Command testserver serves the real bot API (package botapi) on loopback, over in-memory
// Kubernetes objects (controller-runtime's fake client) and the in-memory store, for the tests of
// the TypeScript client (clients/typescript). It is a test fixture, never a way to run botpool.
//
// It listens on two loopback ports and prints one JSON line on stdout:
//
//	{"apiUrl":"http://127.0.0.1:P1","controlUrl":"http://127.0.0.1:P2","namespace":"team-a"}
//
// apiUrl is botapi's own Handler, unchanged. controlUrl is this binary's control API, which only
// a test uses, standing in for the operator's controllers: create a slot (its token and
// application uuid), bind a bot to it (which wakes the slot's waiting config request, as the
// manager's informer does), release it, delete or finish the bot, replace the slot's token, make
// the store refuse the next heartbeats (503), advance the clock of the event quota, read a bot's
// status and events, list the requests the bot API answered. The process exits when its stdin
// closes (the test that started it ended, however it ended) or on SIGINT/SIGTERM.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/botapi"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/slottoken"
	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/memory"
)

// namespace holds every object the server makes.
const namespace = "team-a"

// testFinalizer keeps a deleted Bot in place with its deletionTimestamp, as the operator's
// finalizer does, so its heartbeats answer "leave".
const testFinalizer = "botpool.dev/testserver"

func main() {
	heartbeat := flag.Duration("heartbeat-interval", 100*time.Millisecond, "the heartbeatInterval the configuration tells bots")
	botEvents := flag.Float64("bot-events-per-second", 100, "the event quota of one bot (events/s, burst of one second's worth, at least 100); its clock moves only when told (POST /advance-quota-clock)")
	verbose := flag.Bool("v", false, "log the bot API's messages on stderr")
	flag.Parse()
	if err := run(*heartbeat, *botEvents, *verbose); err != nil {
		log.Fatal(err)
	}
}

func run(heartbeat time.Duration, botEvents float64, verbose bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { // the test that started us is gone when our stdin closes
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	s, err := newServer(ctx, heartbeat, botEvents, verbose)
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	apiLn, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	controlLn, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	servers := []*http.Server{
		{Handler: s.logRequests(s.api.Handler()), ReadHeaderTimeout: 5 * time.Second},
		{Handler: s.controlHandler(), ReadHeaderTimeout: 5 * time.Second},
	}
	errc := make(chan error, 2)
	for i, ln := range []net.Listener{apiLn, controlLn} {
		go func() { errc <- servers[i].Serve(ln) }()
	}
	ready, _ := json.Marshal(map[string]string{
		"apiUrl": "http://" + apiLn.Addr().String(), "controlUrl": "http://" + controlLn.Addr().String(), "namespace": namespace,
	})
	fmt.Println(string(ready))

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, srv := range servers {
		_ = srv.Shutdown(shutdown) // waiting config requests end with the deadline: close them
		_ = srv.Close()
	}
	return nil
}

// server is the bot API and what the control API changes under it.
type server struct {
	api        *botapi.Server
	kube       client.Client
	slots      *controllertest.FakeInformer // wakes the waiting config requests, as an informer does
	store      *memory.Store
	flaky      *flakyLiveness
	quotaClock *clocktesting.FakeClock

	mu       sync.Mutex
	n        int // names the objects made
	requests []request
}

// request is one request the bot API received; Status is 0 while it is being served.
type request struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	Query  string `json:"query,omitempty"`
	Status int    `json:"status"`
}

func newServer(ctx context.Context, heartbeat time.Duration, botEvents float64, verbose bool) (*server, error) {
	scheme := bt.Scheme()
	builder := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&v1.Bot{}, &v1.BotPoolSlot{})
	// The bot API's lookups are cache indexes; the fake client serves them as the cache does.
	if err := botapi.IndexFields(ctx, builderIndexer{builder}); err != nil {
		return nil, err
	}
	kube := builder.Build()
	informers := &informertest.FakeInformers{Scheme: scheme}
	slots, err := informers.FakeInformerFor(ctx, &v1.BotPoolSlot{})
	if err != nil {
		return nil, err
	}
	s := &server{kube: kube, slots: slots, store: memory.New(), quotaClock: clocktesting.NewFakeClock(time.Now())}
	s.flaky = &flakyLiveness{Liveness: s.store}
	logger := logr.Discard()
	if verbose {
		logger = funcr.New(func(prefix, args string) { log.Println(prefix, args) }, funcr.Options{})
	}
	// The bot's event quota runs on a clock of its own that moves only when a test says so:
	// a test that spends it meets 429 however slow the machine is.
	quota := botapi.EventQuota{BotEvents: botEvents, Window: time.Second}
	s.api = botapi.New(botapi.Config{
		Cache: kube, Client: kube, APIReader: kube,
		Liveness:          botapi.WithEventQuota(s.flaky, quota, s.quotaClock, nil),
		Log:               logger,
		HeartbeatInterval: heartbeat,
		// The fake client is a cache that never lags behind the writes: no catch-up wait for
		// an unknown binding credential.
		CatchUp: -1,
	})
	if err := s.api.WatchBindings(ctx, informers); err != nil {
		return nil, err
	}
	return s, nil
}

// builderIndexer registers the bot API's indexes on the fake client being built.
type builderIndexer struct{ b *fake.ClientBuilder }

func (i builderIndexer) IndexField(_ context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	i.b.WithIndex(obj, field, fn)
	return nil
}

// flakyLiveness is the store, refusing the next failBeats heartbeats as a store that cannot
// take them does (the bot API answers those 503 with Retry-After).
type flakyLiveness struct {
	botapi.Liveness

	mu        sync.Mutex
	failBeats int
}

func (f *flakyLiveness) RecordHeartbeat(ctx context.Context, hb store.Heartbeat) error {
	f.mu.Lock()
	fail := f.failBeats > 0
	if fail {
		f.failBeats--
	}
	f.mu.Unlock()
	if fail {
		return errors.New("testserver: the store refuses this heartbeat")
	}
	return f.Liveness.RecordHeartbeat(ctx, hb)
}

// logRequests records every request of the bot API and its answer's status.
func (s *server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		i := len(s.requests)
		s.requests = append(s.requests, request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery})
		s.mu.Unlock()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		s.mu.Lock()
		s.requests[i].Status = rec.status
		s.mu.Unlock()
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// controlHandler is the control API: JSON in, JSON out, errors as {"error": "..."}.
func (s *server) controlHandler() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h func(ctx context.Context, in map[string]string) (any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			in := map[string]string{}
			for k := range r.URL.Query() {
				in[k] = r.URL.Query().Get(k)
			}
			if r.Method == http.MethodPost && r.ContentLength != 0 {
				if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
					writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
					return
				}
			}
			out, err := h(r.Context(), in)
			if err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
				return
			}
			writeJSON(w, http.StatusOK, out)
		})
	}
	handle("POST /slots", s.createSlot)
	handle("POST /bind", s.bind)
	handle("POST /release", s.release)
	handle("POST /replace-token", s.replaceToken)
	handle("POST /delete-bot", s.deleteBot)
	handle("POST /finish-bot", s.finishBot)
	handle("POST /fail-heartbeats", s.failHeartbeats)
	handle("POST /advance-quota-clock", s.advanceQuotaClock)
	handle("GET /bot", s.getBot)
	handle("GET /requests", func(context.Context, map[string]string) (any, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return append([]request{}, s.requests...), nil
	})
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *server) next(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return fmt.Sprintf("%s-%03d", prefix, s.n)
}

func newUID() types.UID {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return types.UID(hex.EncodeToString(b))
}

// createSlot makes an Idle slot with an application and a token, as the slot controller does
// once the slot's container is deployed; it answers what that container's environment holds.
func (s *server) createSlot(ctx context.Context, _ map[string]string) (any, error) {
	name := s.next("pool-slot")
	token, err := slottoken.New()
	if err != nil {
		return nil, err
	}
	slot := bt.MakeSlot(namespace, name, "pool").UID(newUID()).Obj()
	if err := s.kube.Create(ctx, slot); err != nil {
		return nil, err
	}
	app := "app-" + string(newUID())[:12]
	slot.Status = v1.BotPoolSlotStatus{Phase: v1.SlotIdle, ApplicationUUID: app, TokenSHA256: slottoken.Hash([]byte(token))}
	if err := s.kube.Status().Update(ctx, slot); err != nil {
		return nil, err
	}
	return map[string]string{"slot": name, "appUuid": app, "token": token}, nil
}

func (s *server) getSlot(ctx context.Context, name string) (*v1.BotPoolSlot, error) {
	slot := &v1.BotPoolSlot{}
	err := s.kube.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, slot)
	return slot, err
}

func (s *server) getBotObj(ctx context.Context, name string) (*v1.Bot, error) {
	bot := &v1.Bot{}
	err := s.kube.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, bot)
	return bot, err
}

// updateSlot changes a slot and tells the informer, which wakes the slot's waiting request.
func (s *server) updateSlot(ctx context.Context, name string, change func(*v1.BotPoolSlot), status bool) error {
	slot, err := s.getSlot(ctx, name)
	if err != nil {
		return err
	}
	old := slot.DeepCopy()
	change(slot)
	if status {
		err = s.kube.Status().Update(ctx, slot)
	} else {
		err = s.kube.Update(ctx, slot)
	}
	if err != nil {
		return err
	}
	s.slots.Update(old, slot)
	return nil
}

// bind creates a Bot (in: "bot" its name, "logLevel" its log-level annotation, "displayName")
// and binds it to the slot (in: "slot"), as the dispatcher does.
func (s *server) bind(ctx context.Context, in map[string]string) (any, error) {
	name := in["bot"]
	if name == "" {
		name = s.next("bot")
	}
	bot := bt.MakeBot(namespace, name).UID(newUID()).Finalizers(testFinalizer).
		MeetingURL("https://meet.google.com/abc-defg-hij").Created(time.Now()).Obj()
	bot.Spec.DisplayName = in["displayName"]
	if lvl := in["logLevel"]; lvl != "" {
		bot.Annotations = map[string]string{v1.AnnotationLogLevel: lvl}
	}
	if err := s.kube.Create(ctx, bot); err != nil {
		return nil, err
	}
	bot.Status.Phase = v1.BotDeploying
	if err := s.kube.Status().Update(ctx, bot); err != nil {
		return nil, err
	}
	err := s.updateSlot(ctx, in["slot"], func(slot *v1.BotPoolSlot) {
		slot.Spec.BotRef = &v1.BotReference{Name: bot.Name, UID: bot.UID}
	}, false)
	if err != nil {
		return nil, err
	}
	return map[string]string{"bot": name}, nil
}

// release ends the slot's binding (in: "slot"): its credential is refused from then on.
func (s *server) release(ctx context.Context, in map[string]string) (any, error) {
	return map[string]bool{"ok": true}, s.updateSlot(ctx, in["slot"], func(slot *v1.BotPoolSlot) { slot.Spec.BotRef = nil }, false)
}

// replaceToken gives the slot a new token (in: "slot"), as a fresh container gets: the old one
// is refused, and a request waiting with it is answered 410.
func (s *server) replaceToken(ctx context.Context, in map[string]string) (any, error) {
	token, err := slottoken.New()
	if err != nil {
		return nil, err
	}
	err = s.updateSlot(ctx, in["slot"], func(slot *v1.BotPoolSlot) { slot.Status.TokenSHA256 = slottoken.Hash([]byte(token)) }, true)
	return map[string]string{"token": token}, err
}

// deleteBot deletes the bot (in: "bot"); its finalizer keeps it, being deleted: its heartbeats
// answer "leave".
func (s *server) deleteBot(ctx context.Context, in map[string]string) (any, error) {
	bot, err := s.getBotObj(ctx, in["bot"])
	if err != nil {
		return nil, err
	}
	return map[string]bool{"ok": true}, s.kube.Delete(ctx, bot)
}

// finishBot sets the bot's phase (in: "bot", "phase", Done by default), as the operator does
// when it ends a bot: a terminal bot's heartbeats answer "exit", its config 410.
func (s *server) finishBot(ctx context.Context, in map[string]string) (any, error) {
	bot, err := s.getBotObj(ctx, in["bot"])
	if err != nil {
		return nil, err
	}
	bot.Status.Phase = v1.BotDone
	if p := in["phase"]; p != "" {
		bot.Status.Phase = v1.BotPhase(p)
	}
	now := metav1.Now()
	bot.Status.FinishedAt = &now
	return map[string]bool{"ok": true}, s.kube.Status().Update(ctx, bot)
}

// failHeartbeats makes the store refuse the next heartbeats (in: "count").
func (s *server) failHeartbeats(_ context.Context, in map[string]string) (any, error) {
	n, err := strconv.Atoi(in["count"])
	if err != nil {
		return nil, fmt.Errorf("count: %w", err)
	}
	s.flaky.mu.Lock()
	s.flaky.failBeats = n
	s.flaky.mu.Unlock()
	return map[string]bool{"ok": true}, nil
}

// advanceQuotaClock moves the event quota's clock (in: "seconds").
func (s *server) advanceQuotaClock(_ context.Context, in map[string]string) (any, error) {
	secs, err := strconv.ParseFloat(in["seconds"], 64)
	if err != nil {
		return nil, fmt.Errorf("seconds: %w", err)
	}
	s.quotaClock.Step(time.Duration(secs * float64(time.Second)))
	return map[string]bool{"ok": true}, nil
}

// botView is what GET /bot answers about a bot (in: "name").
type botView struct {
	Phase             string          `json:"phase"`
	Reason            string          `json:"reason,omitempty"`
	Message           string          `json:"message,omitempty"`
	RecordingLocation string          `json:"recordingLocation,omitempty"`
	Started           bool            `json:"started"`
	Claimed           bool            `json:"claimed"`
	Deleting          bool            `json:"deleting"`
	Heartbeats        bool            `json:"heartbeats"`
	Events            []botEventView  `json:"events"`
	Status            json.RawMessage `json:"status"`
}

type botEventView struct {
	Type string          `json:"type"`
	At   time.Time       `json:"at"`
	Data json.RawMessage `json:"data,omitempty"`
}

func (s *server) getBot(ctx context.Context, in map[string]string) (any, error) {
	bot, err := s.getBotObj(ctx, in["name"])
	if err != nil {
		return nil, err
	}
	status, _ := json.Marshal(bot.Status)
	v := botView{Phase: string(bot.Status.Phase), Reason: string(bot.Status.Reason), Message: bot.Status.Message,
		RecordingLocation: bot.Status.RecordingLocation, Started: bot.Status.StartedAt != nil,
		Claimed: bot.Status.Binding != nil, Deleting: bot.DeletionTimestamp != nil, Status: status, Events: []botEventView{}}
	beats, err := s.store.LastHeartbeats(ctx, []types.UID{bot.UID})
	if err != nil {
		return nil, err
	}
	_, v.Heartbeats = beats[bot.UID]
	events, err := s.store.BotEvents(ctx, bot.UID)
	if err != nil {
		return nil, err
	}
	for _, e := range events {
		v.Events = append(v.Events, botEventView{Type: e.Type, At: e.At, Data: e.Data})
	}
	return v, nil
}
