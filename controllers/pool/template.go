package pool

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/controllers/internal/policy"
)

// The pool's side of the slot template (template.go): which template the pool rolls out now,
// and which image each of its servers may give a slot. The rule that keeps bots off cold
// pulls: a slot is given an image only once its server's pre-pull of it finished
// (status.servers[].cached); until then a new slot takes the newest image its server holds,
// and an existing slot keeps its own.

// envDigestTTL is how long the pool controller believes a slotEnvFrom Secret's digest. The
// manager caches no Secret (see main.go), so a change of one is seen by this re-read, within
// envDigestTTL and the pool's next pass (at most templateRecheck).
const envDigestTTL = 20 * time.Second

// templateRecheck bounds the pool's requeue while it names a slotEnvFrom Secret, so that a
// change of the Secret's content rolls the slots out within about a minute.
const templateRecheck = time.Minute

// envDigests remembers the digest of each slotEnvFrom Secret for envDigestTTL, so that a burst
// of pool passes reads the Secret once.
type envDigests struct {
	mu   sync.Mutex
	seen map[types.NamespacedName]envDigestEntry
}

type envDigestEntry struct {
	digest string
	at     time.Time
}

// digest returns the digest of the Secret's data (SecretDigest), read past the cache. A
// missing Secret or one without the opt-in label is an error: the slots stall on it, and the
// pool keeps the template it had.
func (d *envDigests) digest(ctx context.Context, r client.Reader, clk clock.PassiveClock, key types.NamespacedName) (string, error) {
	now := clk.Now()
	d.mu.Lock()
	if e, ok := d.seen[key]; ok && now.Sub(e.at) < envDigestTTL && !now.Before(e.at) {
		d.mu.Unlock()
		return e.digest, nil
	}
	d.mu.Unlock()
	var secret corev1.Secret
	if err := r.Get(ctx, key, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("slotEnvFrom Secret %s: %w", key.Name, pass.ErrSlotEnvNotFound)
		}
		return "", fmt.Errorf("slotEnvFrom Secret %s: %w", key.Name, err)
	}
	if err := policy.AllowedForPools(&secret); err != nil {
		return "", err
	}
	sum := policy.SecretDigest(secret.Data)
	d.mu.Lock()
	if d.seen == nil {
		d.seen = map[types.NamespacedName]envDigestEntry{}
	}
	d.seen[key] = envDigestEntry{digest: sum, at: now}
	d.mu.Unlock()
	return sum, nil
}

// forget drops what is remembered of a Secret (the pool that named it is gone).
func (d *envDigests) forget(key types.NamespacedName) {
	d.mu.Lock()
	delete(d.seen, key)
	d.mu.Unlock()
}

// readTemplate computes the template the pool asks for now (s.template). When the slotEnvFrom
// Secret cannot be read, the pool keeps the template its status names (s.templateErr says
// why): a rollout never starts on a guess.
func (r *Reconciler) readTemplate(ctx context.Context, s *poolScope) {
	digest := ""
	if ref := s.pool.Spec.SlotEnvFrom; ref != nil {
		d, err := r.envDigests.digest(ctx, r.APIReader, r.Clock, types.NamespacedName{Namespace: s.pool.Namespace, Name: ref.Name})
		if err != nil {
			s.templateErr = err
			return
		}
		digest = d
	}
	t := policy.PoolTemplate(s.pool, digest, r.BotAPIURL)
	s.template = &t
}
