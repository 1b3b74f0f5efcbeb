package slot

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/pass"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/slottoken"
)

// tokenFixture is a slot reconciler over a fake API server holding one slot and, optionally,
// a Secret under the slot's token Secret name.
func tokenFixture(t *testing.T, status v1.BotPoolSlotStatus, secret func(slot *v1.BotPoolSlot) *corev1.Secret) (*Reconciler, *v1.BotPoolSlot, client.Client) {
	t.Helper()
	slot := bt.MakeSlot("team", "pool-zoom-001", "pool").UID("slot-uid").Obj()
	slot.Status = status
	b := fake.NewClientBuilder().WithScheme(bt.Scheme()).WithObjects(slot.DeepCopy())
	if secret != nil {
		b = b.WithObjects(secret(slot))
	}
	c := b.Build()
	return &Reconciler{Client: c, APIReader: c, Clock: clocktesting.NewFakeClock(time.Unix(1_000_000, 0))}, slot, c
}

// tokenSecret is a Secret under the slot's token Secret name, controlled by the slot and
// labelled as the operator labels its own, holding token.
func tokenSecret(t *testing.T, token string) func(*v1.BotPoolSlot) *corev1.Secret {
	return func(slot *v1.BotPoolSlot) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: slot.Namespace, Name: slottoken.SecretName(slot.Name),
			Labels: map[string]string{v1.LabelSlotToken: "true", v1.LabelSlot: slot.Name, v1.LabelPool: slot.Spec.Pool}},
			Data: map[string][]byte{slottoken.Key: []byte(token)}}
		if err := controllerutil.SetControllerReference(slot, s, bt.Scheme()); err != nil {
			t.Fatal(err)
		}
		return s
	}
}

func storedToken(t *testing.T, c client.Client, slot *v1.BotPoolSlot) string {
	t.Helper()
	var s corev1.Secret
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: slot.Namespace, Name: slottoken.SecretName(slot.Name)}, &s); err != nil {
		t.Fatal(err)
	}
	return string(s.Data[slottoken.Key])
}

// TestTokenIssuedIsRecorded: a new slot's token goes into its Secret and its hash into the
// slot's status; the next pass serves the same token.
func TestTokenIssuedIsRecorded(t *testing.T) {
	r, slot, c := tokenFixture(t, v1.BotPoolSlotStatus{}, nil)
	token, err := r.tokens().ensure(context.Background(), slot)
	if err != nil {
		t.Fatal(err)
	}
	if token == "" || storedToken(t, c, slot) != token || slot.Status.TokenSHA256 != slottoken.Hash([]byte(token)) {
		t.Fatalf("token %q, Secret %q, recorded hash %q: want the token in both", token, storedToken(t, c, slot), slot.Status.TokenSHA256)
	}
	again, err := r.tokens().ensure(context.Background(), slot)
	if err != nil || again != token {
		t.Errorf("second pass: %q, %v; want the same token", again, err)
	}
}

// TestForgedTokenSecretIsReplaced: a Secret under the slot's token Secret name that looks like
// the operator's (labels, controller reference to the slot) but holds another token than the
// one whose hash the slot recorded — or any token, on a slot that recorded none yet — is never
// served: a new token is issued, stored and recorded.
func TestForgedTokenSecretIsReplaced(t *testing.T) {
	issued, _ := slottoken.New()
	forged, _ := slottoken.New()
	for name, status := range map[string]v1.BotPoolSlotStatus{
		"a slot that recorded another token": {TokenSHA256: slottoken.Hash([]byte(issued))},
		"a new slot, before it records one":  {},
	} {
		t.Run(name, func(t *testing.T) {
			r, slot, c := tokenFixture(t, status, tokenSecret(t, forged))
			token, err := r.tokens().ensure(context.Background(), slot)
			if err != nil {
				t.Fatal(err)
			}
			if token == forged || token == issued {
				t.Fatalf("served %s token", map[bool]string{true: "the forged", false: "an old"}[token == forged])
			}
			if storedToken(t, c, slot) != token || slot.Status.TokenSHA256 != slottoken.Hash([]byte(token)) {
				t.Errorf("the new token is not both stored and recorded")
			}
		})
	}
}

// TestTokenHashBackfill: slots made before slots recorded their token's hash (an upgrade) get
// it from the token Secret the operator made for them, so their running containers keep
// working; a Secret that is not the operator's is not believed, and a free slot without a
// trustworthy one goes back through create for a new token.
func TestTokenHashBackfill(t *testing.T) {
	legacyToken, _ := slottoken.New()
	busy := v1.BotPoolSlotStatus{Phase: v1.SlotBusy, ApplicationUUID: "app-1"}
	idle := v1.BotPoolSlotStatus{Phase: v1.SlotIdle, ApplicationUUID: "app-1"}
	foreign := func(slot *v1.BotPoolSlot) *corev1.Secret {
		s := tokenSecret(t, legacyToken)(slot)
		s.OwnerReferences = nil // not controlled by the slot
		return s
	}
	tests := []struct {
		name      string
		status    v1.BotPoolSlotStatus
		secret    func(*v1.BotPoolSlot) *corev1.Secret
		wantHash  string
		wantPhase v1.SlotPhase
	}{
		{"busy slot, the operator's Secret", busy, tokenSecret(t, legacyToken), slottoken.Hash([]byte(legacyToken)), v1.SlotBusy},
		{"busy slot, a foreign Secret", busy, foreign, "", v1.SlotBusy},
		{"idle slot, no Secret", idle, nil, "", v1.SlotCreating},
		{"idle slot, a foreign Secret", idle, foreign, "", v1.SlotCreating},
		{"no application yet", v1.BotPoolSlotStatus{Phase: v1.SlotCreating}, tokenSecret(t, legacyToken), "", v1.SlotCreating},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, slot, _ := tokenFixture(t, tt.status, tt.secret)
			s := &slotScope{slot: slot}
			if err := r.backfillTokenHash(context.Background(), s); err != nil {
				t.Fatal(err)
			}
			if slot.Status.TokenSHA256 != tt.wantHash || slot.Status.Phase != tt.wantPhase {
				t.Errorf("hash %q, phase %s; want %q, %s", slot.Status.TokenSHA256, slot.Status.Phase, tt.wantHash, tt.wantPhase)
			}
		})
	}

	// A slot that records a hash is left alone: the Secret is not even read.
	r, slot, c := tokenFixture(t, v1.BotPoolSlotStatus{Phase: v1.SlotBusy, ApplicationUUID: "app-1", TokenSHA256: slottoken.Hash([]byte("x"))}, nil)
	r.APIReader = failingReader{c}
	if err := r.backfillTokenHash(context.Background(), &slotScope{slot: slot}); err != nil {
		t.Errorf("a slot with a hash read its Secret: %v", err)
	}
}

// failingReader fails every read, to show a path reads nothing.
type failingReader struct{ client.Reader }

func (failingReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return apierrors.NewServiceUnavailable("no reads expected")
}

// TestATokenSecretNameTakenByAnotherSecretIsLeftAlone: a Secret of the namespace's own under
// the slot's token Secret name (no operator label, no slot as its controller) is not deleted
// (issue 30: the manager deleted any Secret of that name): the slot stalls with
// TokenSecretTaken, saying how to fix it, and issues nothing. A leftover of a retired slot of
// the same name (the operator's mark, another slot uid) is still replaced.
func TestATokenSecretNameTakenByAnotherSecretIsLeftAlone(t *testing.T) {
	const theirs = "the team's own value"
	for name, mutate := range map[string]func(*corev1.Secret){
		"no label, no controller":          func(s *corev1.Secret) { s.Labels, s.OwnerReferences = nil, nil },
		"the labels, but no controller":    func(s *corev1.Secret) { s.OwnerReferences = nil },
		"a controller, but not the labels": func(s *corev1.Secret) { s.Labels = nil },
		"labelled for another slot":        func(s *corev1.Secret) { s.Labels[v1.LabelSlot] = "pool-zoom-002" },
	} {
		t.Run(name, func(t *testing.T) {
			r, slot, c := tokenFixture(t, v1.BotPoolSlotStatus{}, func(slot *v1.BotPoolSlot) *corev1.Secret {
				s := tokenSecret(t, theirs)(slot)
				mutate(s)
				return s
			})
			_, err := r.tokens().ensure(context.Background(), slot)
			if reason, ok := pass.NeedsPerson(err); !ok || reason != v1.ReasonTokenSecretTaken {
				t.Fatalf("tokens.ensure: %v (reason %q); want a stall with %s", err, reason, v1.ReasonTokenSecretTaken)
			}
			if storedToken(t, c, slot) != theirs || slot.Status.TokenSHA256 != "" {
				t.Fatalf("the Secret holds %q and the slot recorded %q: want theirs left alone, nothing issued", storedToken(t, c, slot), slot.Status.TokenSHA256)
			}
		})
	}
	t.Run("a retired slot's leftover is replaced", func(t *testing.T) {
		r, slot, c := tokenFixture(t, v1.BotPoolSlotStatus{}, func(slot *v1.BotPoolSlot) *corev1.Secret {
			old := slot.DeepCopy()
			old.UID = "retired-slot-uid"
			return tokenSecret(t, theirs)(old)
		})
		token, err := r.tokens().ensure(context.Background(), slot)
		if err != nil || token == theirs || storedToken(t, c, slot) != token {
			t.Fatalf("tokens.ensure: %q, %v; want a new token stored", token, err)
		}
	})
}
