package bot

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/fakeapi"
	"botpool.dev/botpool/internal/botparams"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestABotWaitsForItsParameters: in single passes of the bot controller, a queued bot whose
// secret parameter cannot be handed out says why in ParametersReady (and its Ready), with one
// Warning Event per reason, and looks again within parametersRecheck; each fix moves it on,
// and once the Secret is right it is ParametersResolved. No message holds the value.
func TestABotWaitsForItsParameters(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	const value = "dg_the-value-itself"
	bot := bt.MakeBot("ns", "standup").UID("uid-standup").PoolRef("pool").SecretParameter("transcriptionKey", "deepgram", "apiKey").Obj()
	c := fakeapi.New(t, interceptor.Funcs{}, bt.MakePool("ns", "pool").Platform(v1.PlatformZoom).MaxSlots(1).Obj(), bot)
	events := &bt.Events{}
	r := &Reconciler{Client: c, Clock: clk, Recorder: events, Store: bt.NopLiveness{}, Secrets: c}
	pass := func(want string) *v1.Bot {
		t.Helper()
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(bot)})
		if err != nil {
			t.Fatal(err)
		}
		got := &v1.Bot{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(bot), got); err != nil {
			t.Fatal(err)
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionParametersReady)
		ready := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady)
		if cond == nil || cond.Reason != want || got.Status.Phase != v1.BotQueued {
			t.Fatalf("phase %s, ParametersReady %+v; want Queued, %s", got.Status.Phase, cond, want)
		}
		if strings.Contains(cond.Message, value) || strings.Contains(ready.Message, value) {
			t.Fatalf("a condition's message holds the value: %q / %q", cond.Message, ready.Message)
		}
		if want != v1.ReasonParametersResolved {
			if cond.Status != metav1.ConditionFalse || !got.ParametersHeld() || ready.Reason != want {
				t.Fatalf("ParametersReady %s, Ready %s (%s); want False and Ready saying %s", cond.Status, ready.Status, ready.Reason, want)
			}
			if res.RequeueAfter <= 0 || res.RequeueAfter > parametersRecheck {
				t.Fatalf("looks again after %v, want within %v (no Secret event wakes it)", res.RequeueAfter, parametersRecheck)
			}
		} else if cond.Status != metav1.ConditionTrue || got.ParametersHeld() {
			t.Fatalf("ParametersReady %+v, want True", cond)
		}
		return got
	}

	pass(v1.ReasonParameterSecretNotFound)
	pass(v1.ReasonParameterSecretNotFound) // no second Event for the same reason
	secret := bt.ParameterSecret("ns", "deepgram", false, map[string]string{"apiKey": value})
	if err := c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	pass(v1.ReasonParameterSecretNotAllowed)
	secret.Labels = map[string]string{v1.LabelAllowBotParameters: "true"}
	secret.Data = map[string][]byte{"apiKey": []byte(strings.Repeat("x", botparams.MaxSecretValueBytes+1))}
	if err := c.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	pass(v1.ReasonParameterSecretTooLarge)
	secret.Data = map[string][]byte{"apiKey": []byte(value)}
	if err := c.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	pass(v1.ReasonParametersResolved)

	want := []string{"Warning/" + v1.ReasonParameterSecretNotFound, "Warning/" + v1.ReasonParameterSecretNotAllowed, "Warning/" + v1.ReasonParameterSecretTooLarge}
	var got []string
	for _, e := range events.Reasons() {
		if strings.Contains(e, "Parameter") {
			got = append(got, e)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Events %v, want %v", got, want)
	}
}

// TestASecondBotForAMeetingEndsDuplicate: in single passes, of two bots of a pool with one
// deduplication key the younger ends Fatal, Duplicate, naming the older; the older queues.
func TestASecondBotForAMeetingEndsDuplicate(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	older := bt.MakeBot("ns", "booked-by-calendar").UID("uid-older").PoolRef("pool").InPool("pool").Phase(v1.BotQueued).
		DeduplicationKey("event-4711").Created(clk.Now().Add(-time.Minute)).Obj()
	younger := bt.MakeBot("ns", "booked-by-crm").UID("uid-younger").PoolRef("pool").DeduplicationKey("event-4711").Created(clk.Now()).Obj()
	c := fakeapi.New(t, interceptor.Funcs{}, bt.MakePool("ns", "pool").Platform(v1.PlatformZoom).MaxSlots(2).Obj(), older, younger)
	events := &bt.Events{}
	r := &Reconciler{Client: c, Clock: clk, Recorder: events, Store: bt.NopLiveness{}}
	for _, b := range []*v1.Bot{younger, older} {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)}); err != nil {
			t.Fatal(err)
		}
	}
	got := &v1.Bot{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(younger), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1.BotFatal || got.Status.Reason != v1.ReasonDuplicate || !strings.Contains(got.Status.Message, "Bot booked-by-calendar holds this meeting") {
		t.Fatalf("the younger bot is %s/%s %q; want Fatal, Duplicate, naming booked-by-calendar", got.Status.Phase, got.Status.Reason, got.Status.Message)
	}
	if !events.Has("Warning/" + string(v1.ReasonDuplicate)) {
		t.Fatalf("Events %v: want a Warning Duplicate", events.Reasons())
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(older), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1.BotQueued {
		t.Fatalf("the older bot is %s/%s, want Queued", got.Status.Phase, got.Status.Reason)
	}
}
