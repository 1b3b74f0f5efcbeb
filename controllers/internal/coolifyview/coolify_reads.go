package coolifyview

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"k8s.io/utils/clock"

	"botpool.dev/botpool/coolify"
)

// BulkReader reads Coolify state in bulk and shares it: one list of a pool's applications per
// interval, and one list of the instance's active deployments per interval, serve every slot
// of the pool, instead of one request per slot per poll; one list of a Coolify user's servers
// (their capacity settings, see server_limits.go) serves every pool of that user. Concurrent
// readers of a stale list share one request.
type BulkReader struct {
	Clock clock.PassiveClock

	flight       singleflight.Group
	mu           sync.Mutex
	AppSnapshots map[string]Snapshot[map[string]coolify.Application] // by pool tag, by app name
	active       map[string]Snapshot[map[string]coolify.Deployment]  // by pool tag, by deployment uuid
	// deleted holds the applications (tag/uuid) we asked Coolify to delete: deletion is
	// asynchronous and lists show them for a while, and a slot must never adopt one.
	deleted map[string]time.Time
	// servers holds each Coolify user's servers by uuid (see Servers); serversTried when a
	// user's last read was tried, so a failing one is not retried on every pass.
	servers      map[string]Snapshot[map[string]coolify.ServerSettings]
	serversTried map[string]time.Time
	// serversSuspect: users whose next read of the servers a slot's failure asked for
	// (ServersSuspect), on the start path.
	serversSuspect map[string]bool
	// failing holds, by pool and server, the run of the pool's starts that failed there
	// (server_failures.go).
	failing map[string]*failRun
	// missing: user|server pairs a second read confirmed the user does not see
	// (serverMissing).
	missing map[string]bool
	// cleanups holds each server's Docker cleanup schedule by instance|user|server
	// (server_cleanup.go).
	cleanups map[string]*cleanupRead
}

type Snapshot[T any] struct {
	items   T
	fetched time.Time
}

// tombstoneTTL outlives Coolify's asynchronous deletion by far.
const tombstoneTTL = 30 * time.Minute

// Apps returns the pool's applications by name, listed at most maxAge ago.
func (b *BulkReader) Apps(ctx context.Context, api CoolifyAPI, tag string, maxAge time.Duration) (map[string]coolify.Application, error) {
	return cached(b, &b.AppSnapshots, "apps/"+tag, tag, maxAge, func() (map[string]coolify.Application, error) {
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
			if _, gone := b.deleted[tag+"/"+a.UUID]; gone {
				continue
			}
			// A server that ignores the tag filter lists every pool's applications, and names
			// repeat across pools (slot names across namespaces; every pool's puller on a
			// server): the one with this tag's owner mark wins the name. (An application of a
			// version before owner marks has none, and is kept when it is the only one.)
			if prev, dup := byName[a.Name]; dup && CarriesTag(&prev, tag) && !CarriesTag(&a, tag) {
				continue
			}
			byName[a.Name] = a
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
func cached[T any](b *BulkReader, m *map[string]Snapshot[T], flightKey, key string, maxAge time.Duration, fetch func() (T, error)) (T, error) {
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
			*m = map[string]Snapshot[T]{}
		}
		(*m)[key] = Snapshot[T]{items: items, fetched: b.Clock.Now()}
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
	delete(b.AppSnapshots, tag)
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
	delete(b.AppSnapshots, tag)
	b.mu.Unlock()
}
