package slot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/internal/slottoken"
)

// The operator's own variables in every slot container (docs/botapi.md).
const (
	envSlotUUID  = "POOL_SLOT_UUID"
	envAPIURL    = "BOTPOOL_API_URL"
	envSlotToken = "BOTPOOL_SLOT_TOKEN"
)

// tokens issues the slots' bot API credentials and composes their containers' environment:
// every read and write of the slot's token Secret and of the pool's slotEnvFrom, all past the
// cache (the manager caches no Secrets).
type tokens struct {
	client    client.Client
	apiReader client.Reader
	botAPIURL string
}

func (r *Reconciler) tokens() tokens {
	return tokens{client: r.Client, apiReader: r.APIReader, botAPIURL: r.BotAPIURL}
}

// ensure returns the slot's bot API token, issuing a new one when the slot has none it can
// trust: it records the hash of the token it issues in status.tokenSHA256, and the bot API
// accepts that token alone. The Secret only keeps the token for the next time the
// application's env is set; it is served only while it still holds the token whose hash the
// slot recorded, so a Secret someone else wrote or changed is replaced, never believed.
func (t tokens) ensure(ctx context.Context, slot *v1.BotPoolSlot) (string, error) {
	return t.issue(ctx, slot, false)
}

// issue is ensure; fresh replaces even the token the slot issued (a standby slot's next
// container gets a credential no earlier container had).
func (t tokens) issue(ctx context.Context, slot *v1.BotPoolSlot, fresh bool) (string, error) {
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: slot.Namespace, Name: slottoken.SecretName(slot.Name)}
	err := t.apiReader.Get(ctx, key, secret)
	switch {
	case err == nil && !fresh && issuedToken(slot, secret):
		return string(secret.Data[slottoken.Key]), nil
	case err == nil && !madeForSlot(slot.Name, secret):
		// Not one this controller made (for a slot of this name): a Secret of the namespace's
		// own that happens to have the name. It is not the operator's to delete.
		return "", fmt.Errorf("%w: Secret %s has the name of this slot's token Secret but lacks the operator's mark "+
			"(label %s=true, label %s=%s and a BotPoolSlot %s as its controller): rename or delete it",
			pass.ErrTokenSecretTaken, key.Name, v1.LabelSlotToken, v1.LabelSlot, slot.Name, slot.Name)
	case err == nil:
		// Left by an earlier slot of the same name (a retired slot the pool replaced), its
		// token changed by someone, or created by this controller before a crash kept it from
		// recording the hash: its token must not serve this slot. The next one is issued while
		// no container has the old one (the application's env is set after this).
		uid := secret.UID
		if err := t.client.Delete(ctx, secret, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return "", fmt.Errorf("deleting a token Secret the slot did not record: %w", err)
		}
	case !apierrors.IsNotFound(err):
		return "", fmt.Errorf("slot token Secret: %w", err)
	}
	token, err := slottoken.New()
	if err != nil {
		return "", err
	}
	secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
		Labels: map[string]string{v1.LabelSlotToken: "true", v1.LabelSlot: slot.Name, v1.LabelPool: slot.Spec.Pool}},
		Data: map[string][]byte{slottoken.Key: []byte(token)}}
	if err := controllerutil.SetControllerReference(slot, secret, t.client.Scheme()); err != nil {
		return "", err
	}
	if err := t.client.Create(ctx, secret); err != nil {
		// AlreadyExists: the replaced one is still being deleted; the next pass tries again.
		return "", fmt.Errorf("creating slot token Secret %s: %w", key.Name, err)
	}
	slot.Status.TokenSHA256 = slottoken.Hash([]byte(token))
	return token, nil
}

// madeForSlot reports whether secret carries the mark of a token Secret this controller made
// for a slot named slot (the slot of that name now, or a retired one the pool replaced): the
// labels it sets and a BotPoolSlot of that name as its controller. Anyone who may write
// Secrets in the namespace can copy the mark, and so chooses to have the Secret replaced.
func madeForSlot(slot string, secret *corev1.Secret) bool {
	owner := metav1.GetControllerOf(secret)
	return secret.Labels[v1.LabelSlotToken] == "true" && secret.Labels[v1.LabelSlot] == slot &&
		owner != nil && owner.Kind == "BotPoolSlot" && owner.Name == slot &&
		strings.HasPrefix(owner.APIVersion, v1.GroupVersion.Group+"/")
}

// issuedToken reports whether secret holds the token whose hash the slot recorded.
func issuedToken(slot *v1.BotPoolSlot, secret *corev1.Secret) bool {
	tok := secret.Data[slottoken.Key]
	return slot.Status.TokenSHA256 != "" && len(tok) > 0 && metav1.IsControlledBy(secret, slot) &&
		slottoken.Hash(tok) == slot.Status.TokenSHA256
}

// backfillTokenHash records the hash of the token of a slot made before slots recorded one
// (an upgrade): its containers run with the token of its Secret, which cannot change under
// them, so the Secret is believed once — if it is the one this controller names, labels and
// controls through the slot. A slot that records a hash, or never got an application (so no
// container has a token yet; create issues one), needs nothing.
//
// A legacy slot whose Secret is missing or foreign gets no hash and its containers no access
// (as before, when the bot API looked the Secret up); a free one goes back through create,
// which issues a token and sets it in the application's env before any bot deploys.
func (r *Reconciler) backfillTokenHash(ctx context.Context, s *slotScope) error {
	slot := s.slot
	if slot.Status.TokenSHA256 != "" || slot.Status.ApplicationUUID == "" || !slot.DeletionTimestamp.IsZero() {
		return nil
	}
	hash, err := r.tokens().legacyHash(ctx, slot)
	if err != nil || hash != "" {
		slot.Status.TokenSHA256 = hash
		return err
	}
	if slot.Status.Phase == v1.SlotIdle && slot.Spec.BotRef == nil {
		r.moveTo(s, v1.SlotCreating, "", "Issuing a new bot API token: the slot's token Secret is missing or not the operator's")
	}
	return nil
}

// legacyHash is the hash of the token in the slot's Secret if the Secret is the one this
// controller names, labels and controls through the slot; "" if it is missing or foreign.
func (t tokens) legacyHash(ctx context.Context, slot *v1.BotPoolSlot) (string, error) {
	secret := &corev1.Secret{}
	err := t.apiReader.Get(ctx, client.ObjectKey{Namespace: slot.Namespace, Name: slottoken.SecretName(slot.Name)}, secret)
	if client.IgnoreNotFound(err) != nil {
		return "", fmt.Errorf("reading the slot's token Secret: %w", err)
	}
	tok := secret.Data[slottoken.Key]
	if err == nil && len(tok) > 0 && metav1.IsControlledBy(secret, slot) &&
		secret.Labels[v1.LabelSlotToken] == "true" && secret.Labels[v1.LabelSlot] == slot.Name {
		return slottoken.Hash(tok), nil
	}
	return "", nil
}

// env is the environment of every container of the slot, and the digest of the pool's
// slotEnvFrom data in it (SecretDigest: part of the slot template).
func (t tokens) env(ctx context.Context, pool *v1.BotPool, slot *v1.BotPoolSlot, token string) ([]coolify.EnvVar, string, error) {
	env := map[string]string{}
	digest := ""
	if ref := pool.Spec.SlotEnvFrom; ref != nil {
		var secret corev1.Secret
		if err := t.apiReader.Get(ctx, client.ObjectKey{Namespace: pool.Namespace, Name: ref.Name}, &secret); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, "", fmt.Errorf("the pool's slotEnvFrom Secret %s: %w", ref.Name, pass.ErrSlotEnvNotFound)
			}
			return nil, "", fmt.Errorf("slotEnvFrom Secret %s: %w", ref.Name, err)
		}
		if err := policy.AllowedForPools(&secret); err != nil {
			return nil, "", fmt.Errorf("the pool's slotEnvFrom: %w", err)
		}
		digest = policy.SecretDigest(secret.Data)
		for k, v := range secret.Data {
			env[k] = string(v)
		}
	}
	// The operator's own variables win over the pool's.
	env[envSlotUUID] = slot.Status.ApplicationUUID
	env[envAPIURL] = t.botAPIURL
	env[envSlotToken] = token
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	vars := make([]coolify.EnvVar, 0, len(keys))
	for _, k := range keys {
		vars = append(vars, coolify.EnvVar{Key: k, Value: env[k], IsLiteral: true})
	}
	return vars, digest, nil
}

// rotateCredential gives the slot a fresh credential for its next container, before that
// container exists: the container of the bot that just ended (and anything the meeting left
// running in it) holds the old one, which the bot API stops accepting as soon as the new hash
// is recorded, so it can neither claim the next binding nor make the slot Ready. Coolify
// applies an env change at the next deployment, which the fresh container is.
func (r *Reconciler) rotateCredential(ctx context.Context, s *slotScope) error {
	token, err := r.tokens().issue(ctx, s.slot, true)
	if err != nil {
		return err
	}
	return r.setEnv(ctx, s, token)
}

// freshCredential prepares a slot whose container was stopped for its next container, in
// either mode: a fresh credential in the application's env (the next container is a
// deployment, which applies it), and on a standby pool status.standby Starting (the Idle step
// deploys it). Whatever the last container kept — a meeting's code still running in it, a
// copy of its environment — can then claim no later binding of the slot (invariant 12). done
// says the pass is over: the application is gone and the slot goes back to Creating.
func (r *Reconciler) freshCredential(ctx context.Context, s *slotScope) (done bool, err error) {
	if err := r.rotateCredential(ctx, s); err != nil {
		if s.slot.Status.ApplicationUUID == "" {
			r.recreate(s)
			return true, nil
		}
		return false, err
	}
	r.setStandby(s, "")
	if standbyPool(s) {
		r.setStandby(s, v1.StandbyStarting)
	}
	return false, nil
}

// setEnv sets the application's env and, where its server holds the image, the pool's
// template (syncTemplate). No container of the slot runs for anyone whenever its env is set:
// the moment to give its application the template too.
//
// The env follows the template, never runs ahead of it: while the slot stays on its template
// (its server has not pulled the new image yet), only the slot's own variables are written
// (its credential, which every fresh container needs) and the slotEnvFrom keys stay those of
// the template the slot runs; a container of the old image never starts with the new
// release's variables, and status.templateHash says what the application holds. When the slot
// takes a new template, the keys the template no longer has (taken out of the Secret, or the
// whole slotEnvFrom) are deleted: an upsert never removes one, and a removed credential would
// otherwise reach every later bot.
func (r *Reconciler) setEnv(ctx context.Context, s *slotScope, token string) error {
	env, digest, err := r.tokens().env(ctx, s.pool, s.slot, token)
	if err != nil {
		return err
	}
	st := &s.slot.Status
	t := policy.PoolTemplate(s.pool, digest, r.BotAPIURL)
	// An application created (or adopted) in this pass, or by an operator before templates,
	// has no template's env to keep: it gets the current one, whatever image its server
	// could give it (CreateImage).
	fresh := s.createdFrom != "" || st.TemplateHash == ""
	follows := fresh || st.TemplateHash == t.Hash() || policy.TemplateReady(s.pool, policy.SlotServer(s.slot, s.pool), t)
	// A slot moving from one template to another drops the keys the new one lacks; one that
	// never recorded a template has none of its own to drop.
	takes := st.TemplateHash != "" && st.TemplateHash != t.Hash() && s.createdFrom == ""
	if !follows {
		env = slices.DeleteFunc(env, func(e coolify.EnvVar) bool { return e.Key != envSlotUUID && e.Key != envSlotToken })
	}
	if _, err := s.api.UpsertEnvs(ctx, st.ApplicationUUID, env); err != nil {
		if errors.Is(err, coolify.ErrNotFound) {
			st.ApplicationUUID = "" // deleted behind our back: create it again
		}
		return fmt.Errorf("setting the application's env: %w", err)
	}
	if !follows {
		return nil
	}
	if takes {
		if err := s.dropStaleEnv(ctx, env); err != nil {
			return err
		}
	}
	return r.syncTemplate(ctx, s, t)
}

// dropStaleEnv deletes the application's variables that env lacks (each row: a key's preview
// twin is a row of its own).
func (s *slotScope) dropStaleEnv(ctx context.Context, env []coolify.EnvVar) error {
	app := s.slot.Status.ApplicationUUID
	have, err := s.api.ListEnvs(ctx, app)
	if err != nil {
		if errors.Is(err, coolify.ErrNotFound) {
			s.slot.Status.ApplicationUUID = ""
		}
		return fmt.Errorf("listing the application's env: %w", err)
	}
	for _, e := range have {
		if slices.ContainsFunc(env, func(w coolify.EnvVar) bool { return w.Key == e.Key }) {
			continue
		}
		if err := s.api.DeleteEnv(ctx, app, e.UUID); err != nil && !errors.Is(err, coolify.ErrNotFound) {
			return fmt.Errorf("deleting variable %s, which the pool's template no longer has: %w", e.Key, err)
		}
	}
	return nil
}
