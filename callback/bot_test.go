package callback

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	botpoolv1alpha1 "botpool.dev/botpool/api/v1alpha1"
)

func TestForBot(t *testing.T) {
	finished := metav1.NewTime(epoch)
	bot := func(url string, phase botpoolv1alpha1.BotPhase) *botpoolv1alpha1.Bot {
		return &botpoolv1alpha1.Bot{
			ObjectMeta: metav1.ObjectMeta{Name: "standup", Namespace: "team-a", UID: "u1"},
			Spec:       botpoolv1alpha1.BotSpec{CallbackURL: url},
			Status: botpoolv1alpha1.BotStatus{
				Phase: phase, Reason: botpoolv1alpha1.ReasonQueueTimeout, Message: "no slot", FinishedAt: &finished,
			},
		}
	}

	c, ok := ForBot(bot("https://hooks.example.com/x", botpoolv1alpha1.BotFatal))
	want := Callback{URL: "https://hooks.example.com/x", Namespace: "team-a", Key: "u1/Fatal", Body: Payload{
		Bot: "standup", Namespace: "team-a", UID: "u1", Phase: "Fatal",
		Reason: "QueueTimeout", Message: "no slot", FinishedAt: epoch,
	}}
	if !ok || !reflect.DeepEqual(c, want) {
		t.Errorf("ForBot = %+v, %v; want %+v, true", c, ok, want)
	}
	if _, ok := ForBot(bot("", botpoolv1alpha1.BotDone)); ok {
		t.Error("a bot without callbackURL got a callback")
	}
	if _, ok := ForBot(bot("https://hooks.example.com/x", botpoolv1alpha1.BotInCall)); ok {
		t.Error("a running bot got a callback")
	}
}
