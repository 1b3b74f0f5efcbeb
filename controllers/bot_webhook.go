package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/callback"
	"botpool.dev/botpool/store"
)

// webhookRecheck: a bot with messages still being tried, or whose webhook cannot be made yet
// (its Secret), is looked at again this often, in case a wake-up from the relay was lost.
const webhookRecheck = time.Minute

var (
	errWebhookSecretNotFound = errors.New("webhook Secret not found")
	// errWebhookSecretNotAllowed: the Secret lacks the opt-in label (see allowedForPools).
	errWebhookSecretNotAllowed = errors.New("webhook Secret not allowed")
)

// WebhookOutbox is what the bot controller uses of the store's outbox: it adds a message per
// phase change and reads back what became of them.
type WebhookOutbox interface {
	AddMessage(ctx context.Context, m store.OutboxMessage) error
	OutboxSummary(ctx context.Context, bot types.UID) (store.OutboxSummary, error)
}

// webhook hands the bot's current phase to the outbox when its webhook wants it and has not
// had it, and copies the outbox's summary into status.webhook. The bot controller is the one
// writer of that field: the relay records outcomes in the outbox and wakes the bot. The
// message is added before the status write that counts it; were that write lost, the next
// pass makes the same message (same id) again, which the outbox ignores.
func (r *BotReconciler) webhook(ctx context.Context, s *botScope) {
	bot := s.bot
	if r.Webhooks == nil || !bot.DeletionTimestamp.IsZero() {
		return
	}
	log := logf.FromContext(ctx)
	st := bot.Status.Webhook
	if st != nil && st.Sequence > 0 {
		sum, err := r.Webhooks.OutboxSummary(ctx, bot.UID)
		if err != nil {
			log.Error(err, "Reading the webhook outbox")
			s.after(webhookRecheck)
		} else {
			r.recordWebhook(s, sum)
		}
	}
	w, err := r.effectiveWebhook(ctx, bot)
	if err != nil {
		log.Error(err, "Reading the bot's pool for its webhook defaults")
		s.after(webhookRecheck)
		return
	}
	phase := bot.Status.Phase
	if w == nil || !w.Wants(phase) || (st != nil && st.Phase == phase) {
		return
	}
	if st == nil {
		st = &v1.WebhookStatus{}
	}
	if w.SecretRef != nil {
		if err := r.checkWebhookSecret(ctx, bot.Namespace, w.SecretRef); err != nil {
			msg := v1.Truncate(err.Error(), maxCallbackError)
			if st.LastError != msg {
				reason := v1.ReasonWebhookSecretNotFound
				if errors.Is(err, errWebhookSecretNotAllowed) {
					reason = v1.ReasonWebhookSecretNotAllowed
				}
				s.events = append(s.events, func() {
					r.Recorder.Eventf(bot, nil, corev1.EventTypeWarning, reason, "Webhook", "%s", msg)
				})
			}
			st.LastError = msg
			bot.Status.Webhook = st
			s.after(webhookRecheck)
			return
		}
	}
	seq := st.Sequence + 1
	if err := r.Webhooks.AddMessage(ctx, callback.PhaseMessage(bot, w, seq, r.Clock.Now())); err != nil {
		log.Error(err, "Adding a webhook message to the outbox", "phase", phase)
		s.after(webhookRecheck)
		return
	}
	st.Sequence, st.Phase = seq, phase
	st.Pending++
	bot.Status.Webhook = st
	s.after(webhookRecheck)
}

// recordWebhook copies the outbox's summary into status.webhook, with a Warning Event per
// message given up since the last write.
func (r *BotReconciler) recordWebhook(s *botScope, sum store.OutboxSummary) {
	st := s.bot.Status.Webhook
	if given := int32(sum.Failed) - st.Failures; given > 0 {
		bot, msg := s.bot, v1.Truncate(sum.LastError, maxCallbackError)
		s.events = append(s.events, func() {
			r.Recorder.Eventf(bot, nil, corev1.EventTypeWarning, v1.ReasonWebhookFailed, "Webhook",
				"%d webhook message(s) given up: %s", given, msg)
		})
	}
	st.Delivered, st.Pending, st.Failures = int32(sum.Delivered), int32(sum.Pending), int32(sum.Failed)
	st.DeliveredPhase = v1.BotPhase(sum.DeliveredPhase)
	st.LastError = v1.Truncate(sum.LastError, maxCallbackError)
	if sum.Pending > 0 {
		s.after(webhookRecheck)
	}
}

// effectiveWebhook is the bot's webhook, or its pool's default (the pool it names or was
// routed to); nil when there is none.
func (r *BotReconciler) effectiveWebhook(ctx context.Context, bot *v1.Bot) (*v1.Webhook, error) {
	if bot.Spec.Webhook != nil {
		return bot.Spec.Webhook, nil
	}
	name := bot.Status.Pool
	if ref := bot.Spec.PoolRef; ref != nil {
		name = ref.Name
	}
	if name == "" {
		return nil, nil
	}
	pool := &v1.BotPool{}
	if err := r.Client.Get(ctx, ctrl.ObjectKey{Namespace: bot.Namespace, Name: name}, pool); err != nil {
		return nil, ctrl.IgnoreNotFound(err)
	}
	return v1.EffectiveWebhook(bot, pool), nil
}

// checkWebhookSecret makes sure the signing Secret exists in the bot's namespace, is opted in
// and has the key, so a message is made only when it can be signed.
func (r *BotReconciler) checkWebhookSecret(ctx context.Context, namespace string, ref *v1.WebhookSecretRef) error {
	if r.Secrets == nil {
		return nil
	}
	_, err := WebhookSecrets{Reader: r.Secrets}.WebhookSecret(ctx, namespace, ref.Name, ref.Key)
	return err
}

// WebhookSecrets reads signing keys for the relay and the bot controller, past the cache (the
// manager caches no Secrets), from the bot's own namespace only.
type WebhookSecrets struct {
	Reader ctrl.Reader
}

// WebhookSecret implements callback.SecretSource.
func (w WebhookSecrets) WebhookSecret(ctx context.Context, namespace, name, key string) ([]byte, error) {
	var secret corev1.Secret
	err := w.Reader.Get(ctx, ctrl.ObjectKey{Namespace: namespace, Name: name}, &secret)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w: Secret %s does not exist in namespace %s", errWebhookSecretNotFound, name, namespace)
	case err != nil:
		return nil, fmt.Errorf("reading webhook Secret %s: %w", name, err)
	}
	if err := allowedForPools(&secret); err != nil {
		return nil, fmt.Errorf("%w: %w", errWebhookSecretNotAllowed, err)
	}
	v, ok := secret.Data[key]
	if !ok || len(v) == 0 {
		return nil, fmt.Errorf("%w: Secret %s has no key %q", errWebhookSecretNotFound, name, key)
	}
	return v, nil
}
