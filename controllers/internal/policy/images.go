package policy

import (
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

const (
	// PullRetry is how long after a first failure the pool tries a pre-pull of the same image
	// again; each further failure in a row doubles it, up to MaxPullRetry (PullBackoff).
	PullRetry = 2 * time.Minute
)

const (
	// MaxPullRetry bounds the wait between two pulls of an image that keeps failing.
	MaxPullRetry = 30 * time.Minute
)

// PullOf reports whether the pull is of ref under the restartedAt annotation restarted.
func PullOf(p *v1.ImagePull, ref, restarted string) bool {
	return p.Image == ref && p.RestartedAt == restarted
}

// PullBackoff is the wait after failures pulls of an image failed in a row: PullRetry after
// the first, doubled after each further one, at most MaxPullRetry. A pull that cannot succeed
// retried every two minutes held one of its server's builds three quarters of the time.
func PullBackoff(failures int32) time.Duration {
	d := PullRetry
	for i := int32(1); i < failures && d < MaxPullRetry; i++ {
		d *= 2
	}
	return min(d, MaxPullRetry)
}

// RestartedAt is the pool's botpool.dev/restartedAt annotation as the status records it
// (bounded: the annotation is free text).
func RestartedAt(pool *v1.BotPool) string {
	v := pool.Annotations[v1.AnnotationRestartedAt]
	if len(v) > v1.MaxRestartedAtLength {
		v = v[:v1.MaxRestartedAtLength]
	}
	return v
}

// ServerImages is what the pool knows of its images on one server: the pre-pulls that
// finished (newest first) and the one in flight or last failed.
type ServerImages struct {
	Cached []v1.CachedImage
	Pull   *v1.ImagePull
	// PullDuration is the last finished pull's (status.servers[].pullDuration).
	PullDuration *metav1.Duration
}

// ImagesOf returns what the pool's status records of its images on each server, without the
// stale pulls (FreshCached): the pool's next status forgets them.
func ImagesOf(pool *v1.BotPool) map[string]*ServerImages {
	out := map[string]*ServerImages{}
	for i := range pool.Status.Servers {
		st := &pool.Status.Servers[i]
		out[st.UUID] = &ServerImages{Cached: FreshCached(pool, st.Cached), Pull: st.Pull, PullDuration: st.PullDuration}
	}
	return out
}

// FreshCached is cached without the pulls of the pool's own image under another restartedAt
// than the pool's: the annotation says a new push of that tag is rolled out, so a deployment
// of it pulls the new push cold; its old pull is no image a slot may be given. Kept, a new
// slot was created on it (CreateImage) and its bot's deployment pulled cold beside a warm
// image, also after the pool had moved on to another tag (found by the model check).
func FreshCached(pool *v1.BotPool, cached []v1.CachedImage) []v1.CachedImage {
	own, restarted := pool.Spec.Image+":"+TagOrLatest(pool.Spec.ImageTag), RestartedAt(pool)
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

// CachedOn reports whether the pool's status records a finished pre-pull of ref on the server
// under the given restartedAt annotation.
func CachedOn(pool *v1.BotPool, server, ref, restarted string) bool {
	for i := range pool.Status.Servers {
		if st := &pool.Status.Servers[i]; st.UUID == server {
			return HasCached(st.Cached, ref, restarted)
		}
	}
	return false
}

// FailedPull is the pool's last pull of image on the server, under the pool's restartedAt,
// when it failed and the server holds no finished pull of that image (FreshCached) to fall
// back on; nil otherwise. A deployment of that image there would most likely fail the same
// way. One under another restartedAt is the pool's to pull again now, and holds nothing back.
func FailedPull(pool *v1.BotPool, server, image string) *v1.ImagePull {
	for i := range pool.Status.Servers {
		st := &pool.Status.Servers[i]
		if st.UUID != server || st.Pull == nil || st.Pull.State != v1.ImagePullFailed || !PullOf(st.Pull, image, RestartedAt(pool)) {
			continue
		}
		if slices.ContainsFunc(FreshCached(pool, st.Cached), func(c v1.CachedImage) bool { return c.Image == image }) {
			return nil
		}
		return st.Pull
	}
	return nil
}

// HasCached reports whether cached lists ref pulled under restarted.
func HasCached(cached []v1.CachedImage, ref, restarted string) bool {
	for _, c := range cached {
		if c.Image == ref && c.RestartedAt == restarted {
			return true
		}
	}
	return false
}

// NewestCached is the newest image the pool pre-pulled on the server that is not stale
// (FreshCached), or "".
func NewestCached(pool *v1.BotPool, server string) string {
	for i := range pool.Status.Servers {
		if st := &pool.Status.Servers[i]; st.UUID == server {
			if fresh := FreshCached(pool, st.Cached); len(fresh) > 0 {
				return fresh[0].Image
			}
		}
	}
	return ""
}

// TemplateReady reports whether a slot on the server may be given the pool's current template
// (the one status.templateHash names): its image was pre-pulled there. The image of a template
// read now (t) must be the status's too, or the pool's status is behind the spec and the slot
// waits for the pool's next pass.
func TemplateReady(pool *v1.BotPool, server string, t SlotTemplate) bool {
	return pool.Status.TemplateHash == t.Hash() && pool.Status.TemplateImage == t.Ref() &&
		CachedOn(pool, server, t.Ref(), RestartedAt(pool))
}

// SplitRef splits image:tag at the tag's colon (a registry host may carry a port, so the last
// colon after the last slash).
func SplitRef(ref string) (image, tag string) {
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

// CreateImage is the image (and tag) a new slot's application on the server is created with:
// the pool's when the server pre-pulled it, or holds no other image of the pool (nothing there
// is warmer); else the newest image the pool pre-pulled there, which the slot leaves for the
// pool's once that pull finished (syncTemplate). A bot bound to a new slot mid-rollout so
// starts warm.
func CreateImage(pool *v1.BotPool, server string) (image, tag string) {
	ref := pool.Spec.Image + ":" + TagOrLatest(pool.Spec.ImageTag)
	if CachedOn(pool, server, ref, RestartedAt(pool)) {
		return pool.Spec.Image, pool.Spec.ImageTag
	}
	if newest := NewestCached(pool, server); newest != "" {
		return SplitRef(newest)
	}
	return pool.Spec.Image, pool.Spec.ImageTag
}

// TagOrLatest is a tag with Coolify's and Docker's reading of an empty one.
func TagOrLatest(tag string) string {
	if tag == "" {
		return v1.DefaultImageTag
	}
	return tag
}
