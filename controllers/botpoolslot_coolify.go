package controllers

import (
	"context"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify"
)

// poolTag is the Coolify tag every application of a pool carries: one GET /applications?tag=
// lists them all.
func poolTag(pool *v1.BotPool) string {
	t := strings.ToLower("botpool-" + pool.Namespace + "-" + pool.Name)
	if len(t) > 100 {
		t = t[:100]
	}
	return t
}

// AppLister reads a pool's applications in bulk: one list per pool per interval, shared by
// every slot of the pool, instead of one GET per slot per poll. Concurrent readers of a stale
// list share one request.
type AppLister struct {
	Clock clock.PassiveClock

	flight singleflight.Group
	mu     sync.Mutex
	lists  map[string]appList // by tag
	// deleted holds the applications we asked Coolify to delete: deletion is asynchronous and
	// lists show them for a while, and a slot must never adopt one.
	deleted map[string]time.Time
}

// tombstoneTTL outlives Coolify's asynchronous deletion by far.
const tombstoneTTL = 30 * time.Minute

type appList struct {
	byName  map[string]coolify.Application
	fetched time.Time
}

// Get returns the pool's applications by name, listed at most maxAge ago.
func (l *AppLister) Get(ctx context.Context, api coolify.API, tag string, maxAge time.Duration) (map[string]coolify.Application, error) {
	l.mu.Lock()
	cached, ok := l.lists[tag]
	l.mu.Unlock()
	if ok && l.Clock.Since(cached.fetched) <= maxAge {
		return cached.byName, nil
	}
	v, err, _ := l.flight.Do(tag, func() (any, error) {
		apps, err := api.ListApplications(ctx, tag)
		if err != nil {
			return nil, err
		}
		now := l.Clock.Now()
		list := appList{byName: make(map[string]coolify.Application, len(apps)), fetched: now}
		l.mu.Lock()
		for uuid, at := range l.deleted {
			if now.Sub(at) > tombstoneTTL {
				delete(l.deleted, uuid)
			}
		}
		for _, a := range apps {
			if _, gone := l.deleted[a.UUID]; !gone {
				list.byName[a.Name] = a
			}
		}
		if l.lists == nil {
			l.lists = map[string]appList{}
		}
		l.lists[tag] = list
		l.mu.Unlock()
		return list.byName, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(map[string]coolify.Application), nil
}

// Invalidate forgets a pool's list, after a change of ours that it must show (a create).
func (l *AppLister) Invalidate(tag string) {
	l.mu.Lock()
	delete(l.lists, tag)
	l.mu.Unlock()
}

// Deleted records that we asked Coolify to delete an application: lists hide it from now on.
func (l *AppLister) Deleted(tag, uuid string) {
	l.mu.Lock()
	if l.deleted == nil {
		l.deleted = map[string]time.Time{}
	}
	l.deleted[uuid] = l.Clock.Now()
	delete(l.lists, tag)
	l.mu.Unlock()
}

// DeployGate bounds the deployments a pool has in flight (maxConcurrentDeployments), and lets
// the first deployment of an image on a server run alone: it pulls the image, and the others
// then start from the server's cache instead of pulling the same gigabytes side by side.
//
// Slots the cache already shows Deploying are counted by the caller; the gate remembers the
// admissions the cache may not show yet, so concurrent reconciles cannot overshoot the limit.
type DeployGate struct {
	Clock clock.PassiveClock

	mu       sync.Mutex
	admitted map[types.NamespacedName]map[string]time.Time // pool → slot → admitted at
	warm     map[string]bool                               // server|image:tag → pulled once
}

// admissionTTL bounds how long an admission counts without the cache confirming it.
const admissionTTL = time.Minute

func imageKey(pool *v1.BotPool) string {
	return pool.Spec.Coolify.ServerUUID + "|" + pool.Spec.Image + ":" + pool.Spec.ImageTag
}

// Admit reports whether slot may start a deployment now. deploying names the pool's slots
// the cache shows Deploying (slot itself excluded).
func (g *DeployGate) Admit(pool *v1.BotPool, slot string, deploying []string, warm bool) bool {
	key := types.NamespacedName{Namespace: pool.Namespace, Name: pool.Name}
	now := g.Clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.admitted == nil {
		g.admitted, g.warm = map[types.NamespacedName]map[string]time.Time{}, map[string]bool{}
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
	if !warm && !g.warm[imageKey(pool)] {
		limit = 1 // the first pull of the image on this server runs alone
	}
	if len(inFlight) >= limit {
		return false
	}
	adm[slot] = now
	return true
}

// Done releases slot's admission; finished says a deployment of the pool's image completed,
// so the image is cached on the server from now on.
func (g *DeployGate) Done(pool *v1.BotPool, slot string, finished bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if adm := g.admitted[types.NamespacedName{Namespace: pool.Namespace, Name: pool.Name}]; adm != nil {
		delete(adm, slot)
	}
	if finished && g.warm != nil {
		g.warm[imageKey(pool)] = true
	}
}
