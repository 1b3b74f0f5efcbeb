package controllers

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
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

// digest returns the digest of the Secret's data (secretDigest), read past the cache. A
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
			return "", fmt.Errorf("slotEnvFrom Secret %s: %w", key.Name, errSlotEnvNotFound)
		}
		return "", fmt.Errorf("slotEnvFrom Secret %s: %w", key.Name, err)
	}
	if err := allowedForPools(&secret); err != nil {
		return "", err
	}
	sum := secretDigest(secret.Data)
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
func (r *BotPoolReconciler) readTemplate(ctx context.Context, s *poolScope) {
	digest := ""
	if ref := s.pool.Spec.SlotEnvFrom; ref != nil {
		d, err := r.envDigests.digest(ctx, r.APIReader, r.Clock, types.NamespacedName{Namespace: s.pool.Namespace, Name: ref.Name})
		if err != nil {
			s.templateErr = err
			return
		}
		digest = d
	}
	t := poolTemplate(s.pool, digest, r.BotAPIURL)
	s.template = &t
}

// restartedAt is the pool's botpool.dev/restartedAt annotation as the status records it
// (bounded: the annotation is free text).
func restartedAt(pool *v1.BotPool) string {
	v := pool.Annotations[v1.AnnotationRestartedAt]
	if len(v) > v1.MaxRestartedAtLength {
		v = v[:v1.MaxRestartedAtLength]
	}
	return v
}

// serverImages is what the pool knows of its images on one server: the pre-pulls that
// finished (newest first) and the one in flight or last failed.
type serverImages struct {
	Cached []v1.CachedImage
	Pull   *v1.ImagePull
	// PullDuration is the last finished pull's (status.servers[].pullDuration).
	PullDuration *metav1.Duration
}

// imagesOf returns what the pool's status records of its images on each server, without the
// stale pulls (freshCached): the pool's next status forgets them.
func imagesOf(pool *v1.BotPool) map[string]*serverImages {
	out := map[string]*serverImages{}
	for i := range pool.Status.Servers {
		st := &pool.Status.Servers[i]
		out[st.UUID] = &serverImages{Cached: freshCached(pool, st.Cached), Pull: st.Pull, PullDuration: st.PullDuration}
	}
	return out
}

// freshCached is cached without the pulls of the pool's own image under another restartedAt
// than the pool's: the annotation says a new push of that tag is rolled out, so a deployment
// of it pulls the new push cold; its old pull is no image a slot may be given. Kept, a new
// slot was created on it (createImage) and its bot's deployment pulled cold beside a warm
// image, also after the pool had moved on to another tag (found by the model check).
func freshCached(pool *v1.BotPool, cached []v1.CachedImage) []v1.CachedImage {
	own, restarted := pool.Spec.Image+":"+tagOrLatest(pool.Spec.ImageTag), restartedAt(pool)
	stale := func(c v1.CachedImage) bool { return c.Image == own && c.RestartedAt != restarted }
	if !slices.ContainsFunc(cached, stale) {
		return cached
	}
	out := make([]v1.CachedImage, 0, len(cached))
	for _, c := range cached {
		if !stale(c) {
			out = append(out, c)
		}
	}
	return out
}

// cachedOn reports whether the pool's status records a finished pre-pull of ref on the server
// under the given restartedAt annotation.
func cachedOn(pool *v1.BotPool, server, ref, restarted string) bool {
	for i := range pool.Status.Servers {
		if st := &pool.Status.Servers[i]; st.UUID == server {
			return hasCached(st.Cached, ref, restarted)
		}
	}
	return false
}

// failedPull is the pool's last pull of image on the server, under the pool's restartedAt,
// when it failed and the server holds no finished pull of that image (freshCached) to fall
// back on; nil otherwise. A deployment of that image there would most likely fail the same
// way. One under another restartedAt is the pool's to pull again now, and holds nothing back.
func failedPull(pool *v1.BotPool, server, image string) *v1.ImagePull {
	for i := range pool.Status.Servers {
		st := &pool.Status.Servers[i]
		if st.UUID != server || st.Pull == nil || st.Pull.State != v1.ImagePullFailed || !pullOf(st.Pull, image, restartedAt(pool)) {
			continue
		}
		if slices.ContainsFunc(freshCached(pool, st.Cached), func(c v1.CachedImage) bool { return c.Image == image }) {
			return nil
		}
		return st.Pull
	}
	return nil
}

// hasCached reports whether cached lists ref pulled under restarted.
func hasCached(cached []v1.CachedImage, ref, restarted string) bool {
	for _, c := range cached {
		if c.Image == ref && c.RestartedAt == restarted {
			return true
		}
	}
	return false
}

// newestCached is the newest image the pool pre-pulled on the server that is not stale
// (freshCached), or "".
func newestCached(pool *v1.BotPool, server string) string {
	for i := range pool.Status.Servers {
		if st := &pool.Status.Servers[i]; st.UUID == server {
			if fresh := freshCached(pool, st.Cached); len(fresh) > 0 {
				return fresh[0].Image
			}
		}
	}
	return ""
}

// templateReady reports whether a slot on the server may be given the pool's current template
// (the one status.templateHash names): its image was pre-pulled there. The image of a template
// read now (t) must be the status's too, or the pool's status is behind the spec and the slot
// waits for the pool's next pass.
func templateReady(pool *v1.BotPool, server string, t slotTemplate) bool {
	return pool.Status.TemplateHash == t.Hash() && pool.Status.TemplateImage == t.Ref() &&
		cachedOn(pool, server, t.Ref(), restartedAt(pool))
}

// splitRef splits image:tag at the tag's colon (a registry host may carry a port, so the last
// colon after the last slash).
func splitRef(ref string) (image, tag string) {
	for i := len(ref) - 1; i >= 0; i-- {
		switch ref[i] {
		case ':':
			return ref[:i], ref[i+1:]
		case '/':
			return ref, ""
		}
	}
	return ref, ""
}

// createImage is the image (and tag) a new slot's application on the server is created with:
// the pool's when the server pre-pulled it, or holds no other image of the pool (nothing there
// is warmer); else the newest image the pool pre-pulled there, which the slot leaves for the
// pool's once that pull finished (syncTemplate). A bot bound to a new slot mid-rollout so
// starts warm.
func createImage(pool *v1.BotPool, server string) (image, tag string) {
	ref := pool.Spec.Image + ":" + tagOrLatest(pool.Spec.ImageTag)
	if cachedOn(pool, server, ref, restartedAt(pool)) {
		return pool.Spec.Image, pool.Spec.ImageTag
	}
	if newest := newestCached(pool, server); newest != "" {
		return splitRef(newest)
	}
	return pool.Spec.Image, pool.Spec.ImageTag
}

// tagOrLatest is a tag with Coolify's and Docker's reading of an empty one.
func tagOrLatest(tag string) string {
	if tag == "" {
		return v1.DefaultImageTag
	}
	return tag
}
