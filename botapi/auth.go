package botapi

import (
	"context"
	"crypto/subtle"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// authenticate finds the slot whose token the request carries. Every failure is the same 401
// so a caller learns nothing about which part was wrong.
func (s *Server) authenticate(r *http.Request) (*v1.BotPoolSlot, error) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return nil, errorf(http.StatusUnauthorized, "missing bearer token: send Authorization: Bearer <BOTPOOL_SLOT_TOKEN>")
	}
	invalid := errorf(http.StatusUnauthorized, "invalid token")

	// Every bot calls through here, several times a minute each: the lookups read the cached
	// objects without the defensive deep copy, which was most of a heartbeat's CPU. That is safe
	// because nothing here changes what it reads, and an informer replaces cached objects rather
	// than changing them; a caller that changes a bot copies it first (boundBot).
	var secrets corev1.SecretList
	if err := s.cfg.Cache.List(r.Context(), &secrets, client.MatchingFields{indexTokenHash: tokenHash([]byte(token))}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	var secret *corev1.Secret
	for i := range secrets.Items {
		// The index lookup matched a hash; the comparison of the token itself is constant-time.
		if subtle.ConstantTimeCompare(secrets.Items[i].Data[TokenKey], []byte(token)) == 1 {
			secret = &secrets.Items[i]
			break
		}
	}
	if secret == nil {
		return nil, invalid
	}
	slot := &v1.BotPoolSlot{}
	key := client.ObjectKey{Namespace: secret.Namespace, Name: secret.Labels[v1.LabelSlot]}
	if err := s.cfg.Cache.Get(r.Context(), key, slot, client.UnsafeDisableDeepCopy); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, invalid // the Secret outlived its slot for a moment
		}
		return nil, err
	}
	if !metav1.IsControlledBy(secret, slot) {
		return nil, invalid // a Secret of an earlier slot of the same name
	}
	if !s.allow(slot.UID) {
		return nil, &apiError{code: http.StatusTooManyRequests, msg: "too many requests from this slot", retryAfter: time.Second}
	}
	return slot, nil
}

// relation is how a named bot relates to the calling slot.
type relation int

const (
	// unrelated: the slot never served this bot; the token does not authorize it.
	unrelated relation = iota
	// bound: the slot's botRef names this bot (same uid).
	bound
	// released: the slot served this bot before, or its Bot object is gone.
	released
)

// botFor resolves the named bot from the calling slot's point of view. bot is nil when the
// Bot object does not exist. bot shares its maps and pointers with the cache: read it only.
func (s *Server) botFor(ctx context.Context, slot *v1.BotPoolSlot, name string) (*v1.Bot, relation, error) {
	bot := &v1.Bot{}
	err := s.cfg.Cache.Get(ctx, client.ObjectKey{Namespace: slot.Namespace, Name: name}, bot, client.UnsafeDisableDeepCopy)
	ref := slot.Spec.BotRef
	switch {
	case apierrors.IsNotFound(err):
		if ref != nil && ref.Name == name {
			return nil, released, nil
		}
		return nil, unrelated, nil
	case err != nil:
		return nil, unrelated, err
	case ref != nil && ref.Name == name && ref.UID == bot.UID:
		return bot, bound, nil
	case bot.Status.SlotName == slot.Name:
		return bot, released, nil
	}
	return bot, unrelated, nil
}

func forbidden(name string) error {
	return errorf(http.StatusForbidden, "this slot's token does not authorize bot "+name)
}
