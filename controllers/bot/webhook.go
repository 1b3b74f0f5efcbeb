package bot

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
// (its Secret), is looked at again this often, in case a wake-up from the relay was lost (the
// relay wakes the bot after every attempt, so this is only the safety net).
const webhookRecheck = 5 * time.Minute

var (
	errWebhookSecretNotFound = errors.New("webhook Secret not found")
	// errWebhookSecretNotAllowed: the Secret lacks the opt-in label LabelAllowWebhookSigning.
	errWebhookSecretNotAllowed = errors.New("webhook Secret not allowed")
	// errWebhookSecretInvalid: the key is there but callback.DecodeSecret refuses it (empty,
	// bad base64, larger than callback.MaxKeyLen).
	errWebhookSecretInvalid = errors.New("webhook signing key unusable")
)

// WebhookOutbox is what the bot controller uses of the store's outbox: it adds a message per
// phase change and reads back what became of them.
type WebhookOutbox interface {
	AddMessage(ctx context.Context, m store.OutboxMessage) error
	OutboxSummary(ctx context.Context, bot types.UID, after int64) (store.OutboxSummary, error)
}

// webhook hands the bot's stored phase to the outbox when its webhook wants it and the outbox
// has no message for it yet, and copies the outbox's summary into status.webhook; the bot
// controller is the one writer of that field (the relay records outcomes in the outbox and
// wakes the bot).
//
// Only a phase already stored is sent: the phase this pass decides may be lost with a status
// write that conflicts (the bot API moved the bot meanwhile), and the pass after the write
// sends it. The outbox numbers a bot's messages: the next follows the highest number the outbox
// or status.webhook knows, and the outbox's latest phase says whether this one was made, so a
// lost status write neither repeats a message nor reuses its number.
//
// stored is the bot as this pass read it: its phase, reason and message make the message.
func (r *Reconciler) webhook(ctx context.Context, s *botScope, stored *v1.Bot) {
	bot, phase := s.bot, stored.Status.Phase
	if r.Webhooks == nil || phase == "" {
		return
	}
	log := logf.FromContext(ctx)
	w, err := r.effectiveWebhook(ctx, bot)
	if err != nil {
		log.Error(err, "Reading the bot's pool for its webhook defaults")
		s.after(webhookRecheck)
		return
	}
	st := bot.Status.Webhook
	want := w != nil && w.Wants(phase) && (st == nil || st.Phase != phase)
	if !want && (st == nil || st.Pending == 0) {
		return // nothing to make, nothing in flight: no read of the outbox
	}
	var counted int64
	if st != nil {
		counted = st.CountedSequence
	}
	sum, err := r.Webhooks.OutboxSummary(ctx, bot.UID, counted)
	if err != nil {
		log.Error(err, "Reading the webhook outbox")
		s.after(webhookRecheck)
		return
	}
	if st == nil {
		st = &v1.WebhookStatus{}
	}
	if want && sum.LastPhase != string(phase) {
		if err := r.checkWebhookSecret(ctx, bot.Namespace, w.SecretRef); err != nil {
			r.webhookSecretRefused(s, st, sum, err)
			return
		}
		seq := max(st.Sequence, sum.LastSeq) + 1
		if err := r.Webhooks.AddMessage(ctx, callback.PhaseMessage(stored, w, seq, r.Clock.Now())); err != nil {
			log.Error(err, "Adding a webhook message to the outbox", "phase", phase, "sequence", seq)
			s.after(webhookRecheck)
			return
		}
		sum.LastSeq, sum.LastPhase = seq, string(phase)
		sum.Pending++
	}
	r.recordWebhook(s, st, sum)
}

// webhookSecretRefused records why no message could be made (the Secret is missing, not opted
// in, or its key unusable), with one Warning Event per new reason; the summary of earlier
// messages still goes to the status.
func (r *Reconciler) webhookSecretRefused(s *botScope, st *v1.WebhookStatus, sum store.OutboxSummary, err error) {
	msg := v1.Truncate(err.Error(), maxCallbackError)
	if st.LastError != msg {
		reason := v1.ReasonWebhookSecretNotFound
		switch {
		case errors.Is(err, errWebhookSecretNotAllowed):
			reason = v1.ReasonWebhookSecretNotAllowed
		case errors.Is(err, errWebhookSecretInvalid):
			reason = v1.ReasonWebhookSecretInvalid
		}
		bot := s.bot
		s.events = append(s.events, func() {
			r.Recorder.Eventf(bot, nil, corev1.EventTypeWarning, reason, "Webhook", "%s", msg)
		})
	}
	r.recordWebhook(s, st, sum)
	st.LastError = msg
	s.after(webhookRecheck)
}

// recordWebhook copies the outbox's summary into status.webhook, with a Warning Event per
// message given up since the last write. The outcomes are added to the counters from the
// summary of the messages above countedSequence, so a message is counted once and the counters
// never go down when the outbox forgets finished messages (retention, the memory outbox's
// history or restart). A lost status write loses the counts with the watermark: the next pass
// counts the same messages again from the same old values.
func (r *Reconciler) recordWebhook(s *botScope, st *v1.WebhookStatus, sum store.OutboxSummary) {
	if sum.Failed > 0 {
		bot, msg, given := s.bot, v1.Truncate(sum.LastError, maxCallbackError), sum.Failed
		s.events = append(s.events, func() {
			r.Recorder.Eventf(bot, nil, corev1.EventTypeWarning, v1.ReasonWebhookFailed, "Webhook",
				"%d webhook message(s) given up: %s", given, msg)
		})
	}
	st.Sequence = max(st.Sequence, sum.LastSeq)
	if sum.LastPhase != "" {
		st.Phase = v1.BotPhase(sum.LastPhase)
	}
	if sum.FinishedThrough > st.CountedSequence {
		st.Delivered += int32(sum.Delivered)
		st.Failures += int32(sum.Failed)
		st.CountedSequence = sum.FinishedThrough
	}
	if sum.DeliveredPhase != "" {
		st.DeliveredPhase = v1.BotPhase(sum.DeliveredPhase)
	}
	st.Pending = int32(sum.Pending)
	st.LastError = v1.Truncate(sum.LastError, maxCallbackError)
	s.bot.Status.Webhook = st
	if sum.Pending > 0 {
		s.after(webhookRecheck)
	}
}

// effectiveWebhook is the bot's webhook, or its pool's default (the pool it names or was
// routed to) when that pool is of the bot's namespace; nil when there is none.
func (r *Reconciler) effectiveWebhook(ctx context.Context, bot *v1.Bot) (*v1.Webhook, error) {
	if bot.Spec.Webhook != nil {
		return bot.Spec.Webhook, nil
	}
	key := bot.PoolKey()
	if ref := bot.Spec.PoolRef; ref != nil {
		key = ctrl.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}
	}
	if key.Namespace == "" {
		key.Namespace = bot.Namespace
	}
	if key.Name == "" || key.Namespace != bot.Namespace {
		// A shared pool's webhookDefaults are its own namespace's: its receiver is no
		// tenant's to write to, and its signing key no tenant's to read.
		return nil, nil
	}
	pool := &v1.BotPool{}
	if err := r.Client.Get(ctx, key, pool); err != nil {
		return nil, ctrl.IgnoreNotFound(err)
	}
	return v1.EffectiveWebhook(bot, pool), nil
}

// checkWebhookSecret makes sure the signing Secret exists in the bot's namespace, is opted in
// and has a usable key, so a message is made only when it can be signed; nil when the webhook
// is unsigned.
func (r *Reconciler) checkWebhookSecret(ctx context.Context, namespace string, ref *v1.WebhookSecretRef) error {
	if r.Secrets == nil || ref == nil {
		return nil
	}
	keys, err := WebhookSecrets{Reader: r.Secrets}.WebhookKeys(ctx, namespace, ref.Name, []string{ref.Key})
	if err != nil {
		return err
	}
	return keys[0].Err
}

// WebhookSecrets reads signing keys for the relay and the bot controller, past the cache (the
// manager caches no Secrets), from the bot's own namespace only.
type WebhookSecrets struct {
	Reader ctrl.Reader
}

// WebhookKeys implements callback.SecretSource: one read of the Secret, and of its data only the
// keys asked for, decoded (at most callback.MaxKeyLen bytes each); the Secret itself is let go.
func (w WebhookSecrets) WebhookKeys(ctx context.Context, namespace, name string, keys []string) ([]callback.SigningKey, error) {
	var secret corev1.Secret
	err := w.Reader.Get(ctx, ctrl.ObjectKey{Namespace: namespace, Name: name}, &secret)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w: Secret %s does not exist in namespace %s", errWebhookSecretNotFound, name, namespace)
	case err != nil:
		return nil, fmt.Errorf("reading webhook Secret %s: %w", name, err)
	}
	if secret.Labels[v1.LabelAllowWebhookSigning] != "true" {
		return nil, fmt.Errorf("%w: Secret %s lacks the label %s=true, which lets Bots sign webhooks with its keys; if that is what it is for, run: kubectl label secret %s -n %s %s=true",
			errWebhookSecretNotAllowed, name, v1.LabelAllowWebhookSigning, name, namespace, v1.LabelAllowWebhookSigning)
	}
	out := make([]callback.SigningKey, len(keys))
	for i, key := range keys {
		v, ok := secret.Data[key]
		if !ok || len(v) == 0 {
			out[i].Err = fmt.Errorf("%w: Secret %s has no key %q", errWebhookSecretNotFound, name, key)
			continue
		}
		if out[i].Key, err = callback.DecodeSecret(v); err != nil {
			out[i].Err = fmt.Errorf("%w: Secret %s key %q: %w", errWebhookSecretInvalid, name, key, err)
		}
	}
	return out, nil
}
