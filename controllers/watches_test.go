package controllers

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/event"

	"botpool.dev/botpool/callback"
)

// TestWakeOnCallbackNamesTheBotAndNeverBlocks: the notifier's outcome wakes the callback's bot,
// by namespace and name; with the channel full, the wake-up is dropped rather than holding the
// notifier's worker (the bot's recheck requeue records the outcome instead).
func TestWakeOnCallbackNamesTheBotAndNeverBlocks(t *testing.T) {
	ch := make(chan event.GenericEvent, 1)
	wake := WakeOnCallback(ch)
	res := callback.Result{Callback: callback.Callback{Body: callback.Payload{Bot: "standup", Namespace: "team-a"}}}
	wake(res)
	wake(res) // the channel is full: this one must return at once
	ev := <-ch
	if ev.Object.GetNamespace() != "team-a" || ev.Object.GetName() != "standup" {
		t.Fatalf("woke %s/%s, want team-a/standup", ev.Object.GetNamespace(), ev.Object.GetName())
	}
	if len(ch) != 0 {
		t.Fatalf("%d more wake-ups queued, want none", len(ch))
	}
}
