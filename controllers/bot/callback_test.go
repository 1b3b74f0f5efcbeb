package bot

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/callback"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// callbackRig is a Bot reconciler on a fake client and a fake clock, for single passes over one
// finished bot; the notifier, when there is one, is real and posts to an httptest receiver.
type callbackRig struct {
	t      *testing.T
	clk    *clocktesting.FakeClock
	client client.Client
	events *bt.Events
	bot    *v1.Bot
	done   chan callback.Result // the notifier's outcomes (the manager wakes the bot on each: WakeOnCallback)
}

func newCallbackRig(t *testing.T, url string) *callbackRig {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	bot := bt.MakeBot("team-a", "standup").UID("uid-standup").MeetingURL("https://zoom.us/j/1").CallbackURL(url).
		Phase(v1.BotDone).FinishedAt(clk.Now()).Obj()
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&v1.Bot{}).WithObjects(bot).Build()
	return &callbackRig{t: t, clk: clk, client: c, events: &bt.Events{}, bot: bot, done: make(chan callback.Result, 10)}
}

// notifier starts a notifier on the rig's clock; it stops with the test.
func (rg *callbackRig) notifier(opts callback.Options) *callback.Notifier {
	rg.t.Helper()
	opts.Clock = rg.clk
	opts.OnResult = func(res callback.Result) { rg.done <- res }
	n := callback.New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = n.Start(ctx) }()
	rg.t.Cleanup(func() { cancel(); <-stopped })
	return n
}

// reconciler is a fresh Bot controller (a restarted or newly elected manager) using q.
func (rg *callbackRig) reconciler(q CallbackQueue) *Reconciler {
	return &Reconciler{Client: rg.client, Clock: rg.clk, Recorder: rg.events, Callbacks: q, Store: bt.NopLiveness{}}
}

func (rg *callbackRig) pass(r *Reconciler) ctrl.Result {
	rg.t.Helper()
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rg.bot)})
	if err != nil {
		rg.t.Fatalf("Reconcile: %v", err)
	}
	return res
}

func (rg *callbackRig) get() *v1.Bot {
	rg.t.Helper()
	b := &v1.Bot{}
	if err := rg.client.Get(context.Background(), client.ObjectKeyFromObject(rg.bot), b); err != nil {
		rg.t.Fatal(err)
	}
	return b
}

// wake waits for the notifier to report an outcome for the rig's bot: the wake-up the
// manager turns it into.
func (rg *callbackRig) wake() {
	rg.t.Helper()
	select {
	case res := <-rg.done:
		if b := res.Callback.Body; b.Bot != rg.bot.Name || b.Namespace != rg.bot.Namespace {
			rg.t.Fatalf("outcome for %s/%s, want %s/%s", b.Namespace, b.Bot, rg.bot.Namespace, rg.bot.Name)
		}
	case <-time.After(time.Minute): // a liveness bound
		rg.t.Fatal("the notifier reported no outcome within a minute")
	}
}

// countingReceiver answers 200 and counts requests.
func countingReceiver(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { n.Add(1) }))
	t.Cleanup(srv.Close)
	return srv, &n
}

// TestDeliveredCallbackIsNeverResent: once delivered, the outcome is recorded on the Bot, and
// neither the end of the notifier's one-hour memory nor a restart (a new notifier and a new
// controller, the same Bot) sends the callback again. Before, every resync after the hour, every
// restart and every leader change sent it once more.
func TestDeliveredCallbackIsNeverResent(t *testing.T) {
	srv, requests := countingReceiver(t)
	rg := newCallbackRig(t, srv.URL+"/hook")
	q := &countingQueue{CallbackQueue: rg.notifier(callback.Options{Egress: bt.AllowLoopback})}
	r := rg.reconciler(q)

	if res := rg.pass(r); res.RequeueAfter != callbackRecheck {
		t.Errorf("a queued callback's bot requeues after %s, want the recheck %s", res.RequeueAfter, callbackRecheck)
	}
	rg.wake()
	rg.pass(r) // the wake-up's pass records the outcome
	got := rg.get().Status.Callback
	if got == nil || got.State != v1.CallbackDelivered || got.Phase != v1.BotDone || got.Attempts != 1 || got.LastError != "" || !got.Time.Equal(&metav1.Time{Time: rg.clk.Now()}) {
		t.Fatalf("status.callback = %+v, want Delivered for Done after 1 attempt, now", got)
	}
	if !rg.events.Has("Normal/" + v1.ReasonCallbackDelivered) {
		t.Errorf("events %v lack %s", rg.events.Reasons(), v1.ReasonCallbackDelivered)
	}

	rg.clk.Step(2 * time.Hour) // past the notifier's memory of delivered keys
	if res := rg.pass(r); res.RequeueAfter != 0 {
		t.Errorf("a recorded callback's bot requeues after %s", res.RequeueAfter)
	}
	restartedQueue := &countingQueue{CallbackQueue: rg.notifier(callback.Options{Egress: bt.AllowLoopback})}
	restarted := rg.reconciler(restartedQueue)
	rg.pass(restarted)
	rg.pass(restarted)
	// Deterministic: a recorded callback is not even handed to a notifier (a resend would
	// happen in the background, after these checks).
	if n := q.enqueued.Load(); n != 1 {
		t.Errorf("the first notifier got the callback %d times, want 1", n)
	}
	if n := restartedQueue.enqueued.Load(); n != 0 {
		t.Errorf("the restarted notifier got a recorded callback %d times", n)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("the receiver got %d requests, want 1", n)
	}
	select {
	case <-rg.done:
		t.Fatal("a notifier finished a second callback")
	default:
	}
}

// TestFullCallbackQueueDoesNotLoseTheCallback: a callback the notifier refuses because its
// queue is full is handed over again by a requeue once there is room, and delivered. Before,
// the refusal was ignored and nothing ever tried again.
func TestFullCallbackQueueDoesNotLoseTheCallback(t *testing.T) {
	release := make(chan struct{})
	blocked := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(blocked.Close)
	t.Cleanup(func() { close(release) })
	srv, requests := countingReceiver(t)
	rg := newCallbackRig(t, srv.URL+"/hook")
	n := rg.notifier(callback.Options{Egress: bt.AllowLoopback, QueueCapacity: 1})
	r := rg.reconciler(n)

	// Another bot's callback fills the queue.
	if !n.Enqueue(callback.Callback{URL: blocked.URL, Key: "other/Done", Body: callback.Payload{Bot: "other", Namespace: "team-a"}}) {
		t.Fatal("the first callback was refused")
	}
	if res := rg.pass(r); res.RequeueAfter != callbackQueueRetry {
		t.Fatalf("refused callback: requeue after %s, want %s", res.RequeueAfter, callbackQueueRetry)
	}
	if res := rg.pass(r); res.RequeueAfter != 2*callbackQueueRetry {
		t.Fatalf("refused again: requeue after %s, want %s", res.RequeueAfter, 2*callbackQueueRetry)
	}
	if rg.get().Status.Callback != nil {
		t.Fatal("a refused callback was recorded")
	}

	release <- struct{}{} // the other callback is delivered: room again
	select {
	case <-rg.done:
	case <-time.After(time.Minute): // a liveness bound
		t.Fatal("the other callback was not delivered within a minute")
	}
	if res := rg.pass(r); res.RequeueAfter != callbackRecheck {
		t.Fatalf("accepted callback: requeue after %s, want %s", res.RequeueAfter, callbackRecheck)
	}
	rg.wake()
	rg.pass(r)
	if got := rg.get().Status.Callback; got == nil || got.State != v1.CallbackDelivered {
		t.Fatalf("status.callback = %+v, want Delivered", got)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("the receiver got %d requests, want 1", n)
	}
}

// countingQueue counts the callbacks handed to a notifier.
type countingQueue struct {
	CallbackQueue
	enqueued atomic.Int32
}

func (q *countingQueue) Enqueue(c callback.Callback) bool {
	q.enqueued.Add(1)
	return q.CallbackQueue.Enqueue(c)
}

// refusingQueue is a notifier whose queue is always full.
type refusingQueue struct{ calls int }

func (q *refusingQueue) Enqueue(callback.Callback) bool { q.calls++; return false }
func (q *refusingQueue) Result(string) (callback.Result, bool) {
	return callback.Result{}, false
}

// TestCallbackQueueFullGivesUpVisibly: a queue that stays full is tried a bounded number of
// times with growing delays; then the callback is recorded Failed with a Warning, and not
// tried again.
func TestCallbackQueueFullGivesUpVisibly(t *testing.T) {
	rg := newCallbackRig(t, "https://hooks.example.com/x")
	q := &refusingQueue{}
	r := rg.reconciler(q)
	var last time.Duration
	for i := 1; i < maxCallbackQueueTries; i++ {
		res := rg.pass(r)
		if res.RequeueAfter < last || res.RequeueAfter == 0 || res.RequeueAfter > callbackQueueRetryCap {
			t.Fatalf("try %d: requeue after %s (previous %s)", i, res.RequeueAfter, last)
		}
		last = res.RequeueAfter
	}
	if res := rg.pass(r); res.RequeueAfter != 0 {
		t.Errorf("the last try requeues after %s", res.RequeueAfter)
	}
	got := rg.get().Status.Callback
	if got == nil || got.State != v1.CallbackFailed || !strings.Contains(got.LastError, "queue") {
		t.Fatalf("status.callback = %+v, want Failed saying the queue was full", got)
	}
	if !rg.events.Has("Warning/" + v1.ReasonCallbackFailed) {
		t.Errorf("events %v lack a Warning %s", rg.events.Reasons(), v1.ReasonCallbackFailed)
	}
	rg.pass(r)
	if q.calls != maxCallbackQueueTries {
		t.Errorf("Enqueue called %d times, want %d", q.calls, maxCallbackQueueTries)
	}
}

// TestRefusedCallbackDestinationIsRecorded: a callbackURL on loopback (an in-cluster or node
// address, the metadata endpoint…) is refused by the egress policy at once, and the Bot says
// so: Failed, one attempt, the reason, a Warning. It is not retried.
func TestRefusedCallbackDestinationIsRecorded(t *testing.T) {
	srv, requests := countingReceiver(t)
	rg := newCallbackRig(t, srv.URL+"/hook")
	r := rg.reconciler(rg.notifier(callback.Options{})) // the manager's default policy
	rg.pass(r)
	rg.wake()
	rg.pass(r)
	got := rg.get().Status.Callback
	if got == nil || got.State != v1.CallbackFailed || got.Attempts != 1 || !strings.Contains(got.LastError, "loopback") {
		t.Fatalf("status.callback = %+v, want Failed after 1 attempt naming loopback", got)
	}
	if !strings.Contains(got.LastError, "POST") {
		t.Errorf("lastError %q does not say which request failed", got.LastError)
	}
	if !rg.events.Has("Warning/" + v1.ReasonCallbackFailed) {
		t.Errorf("events %v lack a Warning %s", rg.events.Reasons(), v1.ReasonCallbackFailed)
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the refused receiver got %d requests", n)
	}
}
