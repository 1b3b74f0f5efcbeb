package botapi

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/internal/slottoken"
	"botpool.dev/botpool/store"
)

// Per-binding credentials. The slot's token (bpt_) only fetches the configuration: the first
// successful config call for a binding — the claim — hands out, with the configuration, a
// fresh credential for that bot only (bpb_), whose SHA-256 the bot API records in the Bot's
// status.binding with an optimistic lock, so two replicas cannot both hand it out. A binding is
// handed out once. Heartbeats, status reports and events require the binding credential, valid
// while the slot recorded in the claim still names the bot in its spec.botRef.
const (
	// bindingPrefix makes leaked binding credentials recognisable to secret scanners.
	bindingPrefix = "bpb_"
	slotPrefix    = "bpt_"
	// bindingCredentialLen is the length of a credential: the prefix and 32 bytes in base64url.
	bindingCredentialLen = len(bindingPrefix) + 43
	// AuditBindingClaimRefused is the type of the audit row (store.BotEvent) of a refused
	// second claim.
	AuditBindingClaimRefused = "bindingClaimRefused"
	// issuedFor is how long this replica remembers a credential it issued, for the calls that
	// reach it before its cache has the claim. Real time, as the cache's lag is.
	issuedFor = time.Minute
	// DefaultCatchUp is how long a replica gives its cache to show a claim it has not seen.
	DefaultCatchUp = time.Second
)

// catchUpPauses are the pauses before looking again for an unknown binding credential, whose
// claim another replica may have written an instant ago: 5%, 20% and 75% of total.
func catchUpPauses(total time.Duration) []time.Duration {
	if total <= 0 {
		return nil
	}
	return []time.Duration{total / 20, total / 5, total * 3 / 4}
}

// sleepReal pauses for d in real time, as the cache's lag is, or until ctx ends.
func sleepReal(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// newBindingCredential returns a fresh credential (256 random bits) and its hash.
func newBindingCredential() (string, string) {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	cred := bindingPrefix + base64.RawURLEncoding.EncodeToString(b)
	return cred, slottoken.Hash([]byte(cred))
}

// issued is a claim this replica made, remembered until its cache shows it.
type issued struct {
	bot   client.ObjectKey
	claim v1.BindingClaim
	botID string // the bot's uid
	until time.Time
}

func (s *Server) rememberIssued(bot *v1.Bot, claim v1.BindingClaim) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for h, i := range s.issued {
		if now.After(i.until) {
			delete(s.issued, h)
		}
	}
	s.issued[claim.CredentialSHA256] = issued{bot: client.ObjectKeyFromObject(bot), claim: claim, botID: string(bot.UID), until: now.Add(issuedFor)}
}

// claimWriteTimeout bounds the write of a claim, which no cancellation of its request cuts.
const claimWriteTimeout = 10 * time.Second

// claim hands out the binding of bot to slot's container: a fresh credential, recorded in the
// Bot's status.binding with an optimistic lock. A binding already claimed is refused with 409,
// a Warning Event and an audit row. bot is the cache's: read only.
func (s *Server) claim(ctx context.Context, slot *v1.BotPoolSlot, cached *v1.Bot) (string, error) {
	// The claim is written whatever becomes of the request meanwhile (a manager stopping
	// cancels the requests it serves): a write cut off after the API server applied it would
	// answer an error, and the container's retry would find its own binding handed out (409).
	// Bounded: a claim that cannot be written in claimWriteTimeout fails as any error does.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimWriteTimeout)
	defer cancel()
	cred, hash := newBindingCredential()
	bot := cached.DeepCopy()
	uid := bot.UID
	// The cache may still hold a version a write of ours replaced: a patch built on it would
	// be refused, so read the current one first.
	first := !s.cfg.Writes.Stale(uid, bot.ResourceVersion)
	var earlier *v1.BindingClaim
	var claim v1.BindingClaim
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			if err := s.cfg.APIReader.Get(ctx, client.ObjectKeyFromObject(bot), bot); err != nil {
				return err
			}
			if bot.UID != uid {
				return apierrors.NewNotFound(v1.GroupVersion.WithResource("bots").GroupResource(), bot.Name)
			}
		}
		first = false
		if c := bot.Status.Binding; c != nil && c.SlotUID == slot.UID {
			earlier = c.DeepCopy()
			return nil
		}
		if bot.Status.Phase.Terminal() {
			return errorf(http.StatusGone, fmt.Sprintf("bot %s is %s: exit", bot.Name, bot.Status.Phase))
		}
		if bot.LeftSlot(slot) {
			// The start failed in this slot and the bot went back to the queue for another:
			// a container here must not get its meeting URL (it would join twice).
			return errorf(http.StatusGone, fmt.Sprintf("bot %s went back to the queue after its start failed in this slot: exit", bot.Name))
		}
		patch := client.MergeFromWithOptions(bot.DeepCopy(), client.MergeFromWithOptimisticLock{})
		claim = v1.BindingClaim{SlotName: slot.Name, SlotUID: slot.UID,
			ClaimedAt: metav1.NewTime(s.cfg.Clock.Now()), CredentialSHA256: hash}
		bot.Status.Binding = &claim
		return s.cfg.Client.Status().Patch(ctx, bot, patch)
	})
	switch {
	case apierrors.IsNotFound(err):
		return "", errorf(http.StatusGone, "bot "+bot.Name+" no longer exists: exit")
	case err != nil:
		return "", err
	case earlier != nil:
		s.refuseClaim(ctx, bot, slot, earlier)
		return "", errorf(http.StatusConflict, fmt.Sprintf("the binding of bot %s was handed out at %s; a binding is handed out once, "+
			"and this container did not receive it: exit", bot.Name, earlier.ClaimedAt.UTC().Format(time.RFC3339)))
	}
	s.rememberIssued(bot, claim)
	return cred, nil
}

// refuseClaim records a second claim of a binding: a Warning Event on the Bot and an audit row.
// Neither failing fails the answer (the 409 is what protects the binding).
func (s *Server) refuseClaim(ctx context.Context, bot *v1.Bot, slot *v1.BotPoolSlot, earlier *v1.BindingClaim) {
	s.metrics.claimsRefused.Inc()
	at := earlier.ClaimedAt.UTC().Format(time.RFC3339)
	if s.cfg.Recorder != nil {
		s.cfg.Recorder.Eventf(bot, nil, corev1.EventTypeWarning, v1.ReasonBindingClaimedTwice, "ClaimBinding",
			"A config call of slot %s's container was refused: the binding was handed out at %s, and is handed out once", slot.Name, at)
	}
	data, _ := json.Marshal(map[string]string{"slot": slot.Name, "slotUID": string(slot.UID), "claimedAt": at})
	err := s.cfg.Liveness.AppendBotEvents(ctx, []store.BotEvent{{
		BotUID: bot.UID, Namespace: bot.Namespace, Name: bot.Name, Type: AuditBindingClaimRefused, Data: data, At: s.cfg.Clock.Now(),
	}})
	if !store.Accepted(err) {
		s.cfg.Log.Error(err, "Recording a refused binding claim failed", "bot", bot.Name, "namespace", bot.Namespace)
	}
}

// authenticateBinding finds the bot whose binding credential the request carries, checks the
// path names that bot and that its binding holds, and applies the slot's rate limit. A binding
// that ended is refused: 410 when the slot let go of a bot that ended (endedBinding), else 401.
// The slot token is refused here: it only claims. bot and slot are the cache's: read only.
func (s *Server) authenticateBinding(r *http.Request) (*v1.Bot, *v1.BotPoolSlot, error) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch {
	case !ok || token == "":
		return nil, nil, s.authFailed(r, errorf(http.StatusUnauthorized, "missing bearer token: send Authorization: Bearer <the credential of the config answer>"))
	case strings.HasPrefix(token, slotPrefix):
		// Not looked up, so not counted: an image written for the slot token learns what to do.
		return nil, nil, errorf(http.StatusUnauthorized, "the slot token (BOTPOOL_SLOT_TOKEN) only fetches the config: "+
			"send the binding credential of the config answer (its \"credential\") with heartbeats, status reports and events")
	}
	bot, claim, err := s.botByCredential(r, token)
	if err != nil {
		return nil, nil, err
	}
	if !s.allow(claim.SlotUID) {
		return nil, nil, &apiError{code: http.StatusTooManyRequests, msg: "too many requests from this slot", retryAfter: time.Second}
	}
	if name := r.PathValue("name"); name != bot.Name {
		return nil, nil, errorf(http.StatusForbidden, "this credential does not authorize bot "+name)
	}
	slot := &v1.BotPoolSlot{}
	// The slot lives in its pool's namespace: another than the bot's when the pool is shared.
	slotKey := client.ObjectKey{Namespace: bot.PoolKey().Namespace, Name: claim.SlotName}
	err = s.cfg.Cache.Get(r.Context(), slotKey, slot, client.UnsafeDisableDeepCopy)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, nil, err
	}
	if ref := slot.Spec.BotRef; err != nil || slot.UID != claim.SlotUID || ref == nil || ref.UID != bot.UID {
		if err == nil && slot.UID == claim.SlotUID {
			if err := endedBinding(bot, slot); err != nil {
				return nil, nil, err // the slot let go of a bot that ended: 410, exit
			}
		}
		return nil, nil, errorf(http.StatusUnauthorized, "the binding of this credential has ended (bot "+bot.Name+" no longer holds its slot): exit")
	}
	return bot, slot, nil
}

// botByCredential finds the bot whose status.binding records the credential's hash: through
// the cache index, else among the claims this replica made that its cache has not shown yet,
// else, for a well-formed credential, after giving the cache a moment (another replica made
// the claim an instant ago). A credential it does not find is a failed authentication of the
// client's address (401, or 429 past its budget). The moment is given only to an address
// within its failure budget, and holds one failure of it meanwhile (failureLimiter.begin):
// an address past its budget is refused at once, not after the pauses, and one sending many
// unknown credentials at once holds no more requests waiting than its budget. A credential
// found after a pause costs nothing.
func (s *Server) botByCredential(r *http.Request, token string) (*v1.Bot, v1.BindingClaim, error) {
	ctx := r.Context()
	hash := slottoken.Hash([]byte(token))
	bot, claim, err := s.findBinding(ctx, hash)
	if !errors.Is(err, errNoSuchToken) {
		return bot, claim, err
	}
	invalid := errorf(http.StatusUnauthorized, "invalid token")
	pauses := catchUpPauses(s.cfg.CatchUp)
	if !strings.HasPrefix(token, bindingPrefix) || len(token) != bindingCredentialLen || len(pauses) == 0 {
		return nil, v1.BindingClaim{}, s.authFailed(r, invalid)
	}
	wait, end := s.authFailures.begin(clientKey(r.RemoteAddr), s.cfg.Clock.Now())
	if wait > 0 {
		return nil, v1.BindingClaim{}, tooManyFailures(wait)
	}
	// A failure unless found, or unless the cache failed us: a client that hangs up during
	// the pauses has its failure counted too.
	failed := true
	defer func() { end(failed, s.cfg.Clock.Now()) }()
	for _, pause := range pauses {
		if err := s.cfg.sleep(ctx, pause); err != nil {
			return nil, v1.BindingClaim{}, err
		}
		bot, claim, err = s.findBinding(ctx, hash)
		if !errors.Is(err, errNoSuchToken) {
			failed = false
			return bot, claim, err
		}
	}
	return nil, v1.BindingClaim{}, invalid
}

// findBinding looks once for the bot whose status.binding records hash: in the cache, else
// among the claims this replica made; errNoSuchToken when neither has it.
func (s *Server) findBinding(ctx context.Context, hash string) (*v1.Bot, v1.BindingClaim, error) {
	var bots v1.BotList
	if err := s.cfg.Cache.List(ctx, &bots, client.MatchingFields{indexBindingHash: hash}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, v1.BindingClaim{}, err
	}
	// Two bots recording one hash is no credential the operator issued: neither is served.
	if len(bots.Items) == 1 {
		bot := &bots.Items[0]
		if c := bot.Status.Binding; c != nil && subtle.ConstantTimeCompare([]byte(c.CredentialSHA256), []byte(hash)) == 1 {
			return bot, *c, nil
		}
	}
	if bot, claim, ok := s.issuedBot(ctx, hash); ok {
		return bot, claim, nil
	}
	return nil, v1.BindingClaim{}, errNoSuchToken
}

// issuedBot finds a claim this replica made and its bot in the cache.
func (s *Server) issuedBot(ctx context.Context, hash string) (*v1.Bot, v1.BindingClaim, bool) {
	s.mu.Lock()
	found, ok := s.issued[hash]
	s.mu.Unlock()
	if !ok || time.Now().After(found.until) {
		return nil, v1.BindingClaim{}, false
	}
	bot := &v1.Bot{}
	if err := s.cfg.Cache.Get(ctx, found.bot, bot, client.UnsafeDisableDeepCopy); err != nil || string(bot.UID) != found.botID {
		return nil, v1.BindingClaim{}, false
	}
	// A later claim of the bot (its cache has it) supersedes this one.
	if c := bot.Status.Binding; c != nil && c.CredentialSHA256 != hash {
		return nil, v1.BindingClaim{}, false
	}
	return bot, found.claim, true
}
