package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify"
)

// poolTagOf is the Coolify tag every application of a pool carries: one GET /applications?tag=
// lists them all.
// The tag is readable (the pool's name) and unique (a hash of namespace and name): names
// alone collide across namespaces ("a"/"b-c" and "a-b"/"c"), and two pools sharing a tag would
// adopt or delete each other's applications.
func poolTagOf(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	if len(name) > 40 {
		name = name[:40]
	}
	return strings.ToLower("botpool-" + name + "-" + hex.EncodeToString(sum[:5]))
}

// BulkReader reads Coolify state in bulk and shares it: one list of a pool's applications per
// interval, and one list of the instance's active deployments per interval, serve every slot
// of the pool, instead of one request per slot per poll. Concurrent readers of a stale list
// share one request.
type BulkReader struct {
	Clock clock.PassiveClock

	flight singleflight.Group
	mu     sync.Mutex
	apps   map[string]snapshot[map[string]coolify.Application] // by pool tag, by app name
	active map[string]snapshot[map[string]coolify.Deployment]  // by pool tag, by deployment uuid
	// deleted holds the applications (tag/uuid) we asked Coolify to delete: deletion is
	// asynchronous and lists show them for a while, and a slot must never adopt one.
	deleted map[string]time.Time
}

type snapshot[T any] struct {
	items   T
	fetched time.Time
}

// tombstoneTTL outlives Coolify's asynchronous deletion by far.
const tombstoneTTL = 30 * time.Minute

// Apps returns the pool's applications by name, listed at most maxAge ago.
func (b *BulkReader) Apps(ctx context.Context, api CoolifyAPI, tag string, maxAge time.Duration) (map[string]coolify.Application, error) {
	return cached(b, &b.apps, "apps/"+tag, tag, maxAge, func() (map[string]coolify.Application, error) {
		apps, err := api.ListApplications(ctx, tag)
		if err != nil {
			return nil, err
		}
		now := b.Clock.Now()
		byName := make(map[string]coolify.Application, len(apps))
		b.mu.Lock()
		defer b.mu.Unlock()
		for key, at := range b.deleted {
			if now.Sub(at) > tombstoneTTL {
				delete(b.deleted, key)
			}
		}
		for _, a := range apps {
			if _, gone := b.deleted[tag+"/"+a.UUID]; !gone {
				byName[a.Name] = a
			}
		}
		return byName, nil
	})
}

// ActiveDeployments returns the queued and in-progress deployments Coolify knows, by uuid,
// listed at most maxAge ago. A deployment missing from it has ended.
func (b *BulkReader) ActiveDeployments(ctx context.Context, api CoolifyAPI, tag string, maxAge time.Duration) (map[string]coolify.Deployment, error) {
	return cached(b, &b.active, "deployments/"+tag, tag, maxAge, func() (map[string]coolify.Deployment, error) {
		deps, err := api.ListActiveDeployments(ctx)
		if err != nil {
			return nil, err
		}
		byUUID := make(map[string]coolify.Deployment, len(deps))
		for _, d := range deps {
			byUUID[d.DeploymentUUID] = d
		}
		return byUUID, nil
	})
}

// cached answers from *m[key] when it is at most maxAge old, else fetches (once for all
// concurrent callers) and stores the result.
func cached[T any](b *BulkReader, m *map[string]snapshot[T], flightKey, key string, maxAge time.Duration, fetch func() (T, error)) (T, error) {
	b.mu.Lock()
	snap, ok := (*m)[key]
	b.mu.Unlock()
	if ok && b.Clock.Since(snap.fetched) <= maxAge {
		return snap.items, nil
	}
	v, err, _ := b.flight.Do(flightKey, func() (any, error) {
		items, err := fetch()
		if err != nil {
			return nil, err
		}
		b.mu.Lock()
		if *m == nil {
			*m = map[string]snapshot[T]{}
		}
		(*m)[key] = snapshot[T]{items: items, fetched: b.Clock.Now()}
		b.mu.Unlock()
		return items, nil
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return v.(T), nil
}

// Invalidate forgets a pool's lists, after a change of ours they must show.
func (b *BulkReader) Invalidate(tag string) {
	b.mu.Lock()
	delete(b.apps, tag)
	delete(b.active, tag)
	b.mu.Unlock()
}

// Deleting reports whether we asked Coolify to delete the application within tombstoneTTL.
func (b *BulkReader) Deleting(tag, uuid string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	at, ok := b.deleted[tag+"/"+uuid]
	return ok && b.Clock.Since(at) <= tombstoneTTL
}

// Deleted records that we asked Coolify to delete an application: lists hide it from now on.
func (b *BulkReader) Deleted(tag, uuid string) {
	b.mu.Lock()
	if b.deleted == nil {
		b.deleted = map[string]time.Time{}
	}
	b.deleted[tag+"/"+uuid] = b.Clock.Now()
	delete(b.apps, tag)
	b.mu.Unlock()
}

// DeployGate bounds the deployments a pool has in flight (maxConcurrentDeployments), and lets
// the first deployment of an image on a server run alone: it pulls the image, and the others
// then start from the server's cache instead of pulling the same gigabytes side by side.
//
// Slots the cache already shows Deploying are counted by the caller; the gate remembers the
// admissions the cache may not show yet, so concurrent reconciles cannot overshoot the limit.
//
// Its maps hold only live state: a pool's admissions go with its last slot's release, a
// pause once it ends, and what is known of an image once unused for warmTTL.
type DeployGate struct {
	Clock clock.PassiveClock

	mu       sync.Mutex
	admitted map[types.NamespacedName]map[string]time.Time // pool → slot → admitted at
	warm     map[string]time.Time                          // pool uid|image:tag → last seen warm
	paused   map[string]time.Time                          // Coolify instance|server → no deploys before
	pruned   time.Time
}

// admissionTTL bounds how long an admission counts without the cache confirming it.
const admissionTTL = time.Minute

// warmTTL is how long the gate remembers an image as cached without a deployment of it;
// forgetting costs one lone deployment (a pull, or a cache hit) the next time.
const warmTTL = 24 * time.Hour

// imageKey names what "warm" is known about: a pool's image. Pools sharing a server each
// learn once that the image is cached, which costs at most one lone deployment per pool.
func imageKey(pool *v1.BotPool) string {
	return string(pool.UID) + "|" + pool.Spec.Image + ":" + pool.Spec.ImageTag
}

// serverKey names a Coolify server: server uuids are unique only within one Coolify instance,
// and a pool on another instance (another tenant's, maybe) must not pause this one's server.
func serverKey(instance string, pool *v1.BotPool) string {
	return instance + "|" + pool.Spec.Coolify.ServerUUID
}

// coolifyInstance names the Coolify instance an API talks to (its base URL), or "" for an
// API that does not say (test fakes).
func coolifyInstance(api CoolifyAPI) string {
	if b, ok := api.(interface{ BaseURL() string }); ok {
		return b.BaseURL()
	}
	return ""
}

// Admit reports whether slot may start a deployment now. deploying names the pool's slots
// the cache shows Deploying (slot itself excluded); instance is the pool's Coolify instance.
func (g *DeployGate) Admit(pool *v1.BotPool, instance, slot string, deploying []string, warm bool) bool {
	key := types.NamespacedName{Namespace: pool.Namespace, Name: pool.Name}
	now := g.Clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.admitted == nil {
		g.admitted = map[types.NamespacedName]map[string]time.Time{}
	}
	if g.warm == nil {
		g.warm = map[string]time.Time{}
	}
	if g.paused == nil { // Pause may have made it already: never replace it
		g.paused = map[string]time.Time{}
	}
	g.prune(now)
	if now.Before(g.paused[serverKey(instance, pool)]) {
		return false
	}
	adm := g.admitted[key]
	if adm == nil {
		adm = map[string]time.Time{}
		g.admitted[key] = adm
	}
	inFlight := map[string]bool{}
	for _, s := range deploying {
		inFlight[s] = true
		delete(adm, s) // the cache shows it now
	}
	for s, at := range adm {
		if now.Sub(at) > admissionTTL {
			delete(adm, s)
		} else {
			inFlight[s] = true
		}
	}
	delete(inFlight, slot)
	limit := int(pool.Spec.MaxConcurrentDeployments)
	if limit < 1 {
		limit = v1.DefaultMaxConcurrentDeployments
	}
	if warm {
		g.warm[imageKey(pool)] = now
	} else if _, known := g.warm[imageKey(pool)]; !known {
		limit = 1 // the first pull of the image on this server runs alone
	}
	if len(inFlight) >= limit {
		return false
	}
	adm[slot] = now
	return true
}

// prune drops ended pauses, expired admissions, empty pools and images not seen warm for
// warmTTL, at most once a minute. Callers hold g.mu.
func (g *DeployGate) prune(now time.Time) {
	if now.Sub(g.pruned) < time.Minute {
		return
	}
	g.pruned = now
	for k, until := range g.paused {
		if !now.Before(until) {
			delete(g.paused, k)
		}
	}
	for k, adm := range g.admitted {
		for s, at := range adm {
			if now.Sub(at) > admissionTTL {
				delete(adm, s)
			}
		}
		if len(adm) == 0 {
			delete(g.admitted, k)
		}
	}
	for k, at := range g.warm {
		if now.Sub(at) > warmTTL {
			delete(g.warm, k)
		}
	}
}

// Pause stops new deployments to the pool's server on its Coolify instance until the given
// time, but never for more than coolify.MaxPause: Coolify answered that its queue is full,
// with a Retry-After that holds for every slot on the server (a server that asks for a year
// is asked again after MaxPause).
func (g *DeployGate) Pause(pool *v1.BotPool, instance string, until time.Time) {
	if limit := g.Clock.Now().Add(coolify.MaxPause); until.After(limit) {
		until = limit
	}
	key := serverKey(instance, pool)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused == nil {
		g.paused = map[string]time.Time{}
	}
	if until.After(g.paused[key]) {
		g.paused[key] = until
	}
}

// Done releases slot's admission; finished says a deployment of the pool's image completed,
// so the image is cached on the server from now on.
func (g *DeployGate) Done(pool *v1.BotPool, slot string, finished bool) {
	key := types.NamespacedName{Namespace: pool.Namespace, Name: pool.Name}
	g.mu.Lock()
	defer g.mu.Unlock()
	if adm := g.admitted[key]; adm != nil {
		delete(adm, slot)
		if len(adm) == 0 {
			delete(g.admitted, key)
		}
	}
	if finished {
		if g.warm == nil {
			g.warm = map[string]time.Time{}
		}
		g.warm[imageKey(pool)] = g.Clock.Now()
	}
}

// size reports how many entries the gate holds, for tests.
func (g *DeployGate) size() (admitted, warm, paused int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.admitted), len(g.warm), len(g.paused)
}

// coolifyWait reports whether err says Coolify (or the client guarding it) wants the call
// made again later, and after how long: a throttled call did not happen, so the caller
// requeues after the wait instead of failing, backing off or erroring the slot.
func coolifyWait(err error) (time.Duration, bool) {
	wait, ok := coolify.RetryAfter(err)
	if !ok {
		return 0, false
	}
	return min(max(wait, 100*time.Millisecond), coolify.MaxPause), true
}

// throttledMessage says why a slot or pool waits, in words that stay the same from one pass
// to the next (no countdown): a changing message would write the status, and the write
// would bring the object straight back.
func throttledMessage(err error) string {
	var we *coolify.WaitError
	reason := "throttled"
	if errors.As(err, &we) {
		reason = we.Reason
	}
	switch reason {
	case coolify.WaitRateLimited, coolify.WaitLimiter:
		return "Coolify's API rate limit is used up; waiting for it before the next request"
	case coolify.WaitBulkhead, coolify.WaitBreaker:
		return "Coolify is not answering in time; the operator holds requests to it back for a while"
	}
	return "Waiting for Coolify"
}
