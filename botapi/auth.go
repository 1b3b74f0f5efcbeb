package botapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/internal/slottoken"
)

// authenticate finds the slot whose token the request carries. Every failure is the same 401
// so a caller learns nothing about which part was wrong. A client address that failed too
// often gets 429 for its failures (see authFailures) — only for them: many containers share
// one address (a Coolify server's, a proxy's), and the retired ones of any tenant, sending a
// replaced slot token or an ended binding's credential, must not lock the others out. The
// lookup is a cache index, cheap enough to make before the limit; what is not cheap (the
// catch-up pauses of an unknown binding credential) comes after it (botByCredential).
func (s *Server) authenticate(r *http.Request) (*v1.BotPoolSlot, error) {
	slot, err := s.findSlot(r)
	if err != nil {
		return nil, s.authFailed(r, err)
	}
	if !s.allow(slot.UID) {
		return nil, &apiError{code: http.StatusTooManyRequests, msg: "too many requests from this slot", retryAfter: time.Second}
	}
	return slot, nil
}

// authFailed counts a failed authentication against the client's address and answers it:
// err (a 401), or 429 once the address failed too often. Other errors pass unchanged.
func (s *Server) authFailed(r *http.Request, err error) error {
	var ae *apiError
	if !errors.As(err, &ae) || ae.code != http.StatusUnauthorized {
		return err
	}
	from, now := clientKey(r.RemoteAddr), s.cfg.Clock.Now()
	if wait := s.authFailures.blocked(from, now); wait > 0 {
		return tooManyFailures(wait)
	}
	s.authFailures.failed(from, now)
	return err
}

// tooManyFailures answers a request whose token does not authenticate, from an address that
// failed too often.
func tooManyFailures(wait time.Duration) error {
	return &apiError{code: http.StatusTooManyRequests, msg: "too many requests with invalid tokens from this address", retryAfter: wait}
}

// findSlot finds the slot whose recorded token hash (status.tokenSHA256, written by the slot
// controller alone) is the hash of the request's token.
func (s *Server) findSlot(r *http.Request) (*v1.BotPoolSlot, error) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return nil, errorf(http.StatusUnauthorized, "missing bearer token: send Authorization: Bearer <BOTPOOL_SLOT_TOKEN>")
	}
	slot, err := s.slotByHash(r.Context(), slottoken.Hash([]byte(token)))
	if errors.Is(err, errNoSuchToken) {
		return nil, errorf(http.StatusUnauthorized, "invalid token")
	}
	return slot, err
}

var errNoSuchToken = errors.New("no slot records this token")

// slotByHash finds the one slot that records hash, or errNoSuchToken.
func (s *Server) slotByHash(ctx context.Context, hash string) (*v1.BotPoolSlot, error) {
	// Every bot calls through here, several times a minute each: the lookups read the cached
	// objects without the defensive deep copy, which was most of a heartbeat's CPU. That is safe
	// because nothing here changes what it reads, and an informer replaces cached objects rather
	// than changing them; a caller that changes a bot copies it first (boundBot).
	var slots v1.BotPoolSlotList
	if err := s.cfg.Cache.List(ctx, &slots, client.MatchingFields{indexTokenHash: hash}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	// Two slots recording one hash is no token the operator issued (it issues each one fresh):
	// someone copied a status. Neither is served.
	if len(slots.Items) != 1 {
		return nil, errNoSuchToken
	}
	slot := &slots.Items[0]
	if subtle.ConstantTimeCompare([]byte(slot.Status.TokenSHA256), []byte(hash)) != 1 {
		return nil, errNoSuchToken
	}
	return slot, nil
}
