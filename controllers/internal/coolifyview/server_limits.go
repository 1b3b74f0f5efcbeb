package coolifyview

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify"
)

// A Coolify server runs concurrent_builds deployments at once (2 by default) and queues at
// most deployment_queue_limit more, for every pool and person deploying to it. The pool
// controller reads each Coolify user's servers (GET /servers) now and then; the deploy gate
// then bounds the deployments in flight per server, over all pools of that user, to what the
// server runs, and a pool that asks for more says so in a condition. Until a read succeeds,
// the gate bounds per pool only, as it always did: a failing GET /servers never holds a
// deployment back.
//
// The same read says whether each server is reachable and usable (its health, see
// server_state.go): a failed deployment or a lost application on a server makes the next pool
// pass read again (ServersSuspect), so an outage takes the server out within seconds.
const (
	// ServersRefresh is how long a user's list of servers is believed: settings change by
	// hand, rarely, but health is what takes a server out, and a read costs one request a
	// minute of the user's budget (200).
	ServersRefresh = time.Minute
	// ServersRetry is how soon a read that failed (or any read) is tried again.
	ServersRetry = 15 * time.Second
	// serversForget drops the list of a user no pool has asked about for this long.
	serversForget = time.Hour
)

// serverLister is the part of a Coolify client that lists servers. *coolify.Client has it;
// a client without it (a unit test's fake) leaves the gate per pool.
type serverLister interface {
	ListServers(ctx context.Context) ([]coolify.Server, error)
}

// CoolifyUser names the Coolify user an API acts as (see coolify.Client.UserKey), or "" for
// an API that does not say.
func CoolifyUser(api CoolifyAPI) string {
	if u, ok := api.(interface{ UserKey() string }); ok {
		return u.UserKey()
	}
	return ""
}

// RefreshServers reads the servers of api's user unless a read is at most ServersRefresh old
// (or one was tried within ServersRetry). It is housekeeping, and a failure changes nothing:
// the last settings read (or none) stay in use.
func (b *BulkReader) RefreshServers(ctx context.Context, api CoolifyAPI) {
	user := CoolifyUser(api)
	lister, ok := api.(serverLister)
	if user == "" || !ok {
		return
	}
	now := b.Clock.Now()
	b.mu.Lock()
	for u, snap := range b.servers {
		if now.Sub(snap.fetched) > serversForget && now.Sub(b.serversTried[u]) > serversForget {
			delete(b.servers, u)
			delete(b.serversTried, u)
		}
	}
	snap, known := b.servers[user]
	due := (!known || now.Sub(snap.fetched) >= ServersRefresh) && now.Sub(b.serversTried[user]) >= ServersRetry
	prio := coolify.Housekeeping
	if due {
		if b.serversTried == nil {
			b.serversTried = map[string]time.Time{}
		}
		b.serversTried[user] = now
		if b.serversSuspect[user] {
			// A slot saw what an outage looks like: telling the pool which server is out
			// keeps the next bots off it, so the read goes with the starts.
			prio = coolify.StartPath
			delete(b.serversSuspect, user)
		}
	}
	b.mu.Unlock()
	if !due {
		return
	}
	b.readServers(ctx, lister, user, prio)
}

// readServers reads user's servers now and keeps what they say (a failure keeps the last
// read).
func (b *BulkReader) readServers(ctx context.Context, lister serverLister, user string, prio coolify.Priority) {
	_, err, _ := b.flight.Do("servers/"+user, func() (any, error) {
		list, err := lister.ListServers(coolify.WithPriority(ctx, prio))
		if err != nil {
			return nil, err
		}
		byUUID := make(map[string]coolify.ServerSettings, len(list))
		for _, s := range list {
			byUUID[s.UUID] = s.Settings
		}
		b.mu.Lock()
		if b.servers == nil {
			b.servers = map[string]Snapshot[map[string]coolify.ServerSettings]{}
		}
		b.servers[user] = Snapshot[map[string]coolify.ServerSettings]{items: byUUID, fetched: b.Clock.Now()}
		b.mu.Unlock()
		return nil, nil
	})
	if err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("Reading the Coolify servers' settings failed; deployments are bounded per pool only until a read succeeds", "error", err.Error())
	}
}

// ServersSuspect makes the next RefreshServers of api's user read the servers again (within
// ServersRetry of the last try): a slot saw something a server outage explains.
func (b *BulkReader) ServersSuspect(api CoolifyAPI) {
	user := CoolifyUser(api)
	b.mu.Lock()
	defer b.mu.Unlock()
	if snap, ok := b.servers[user]; ok {
		snap.fetched = time.Time{}
		b.servers[user] = snap
		if b.serversSuspect == nil {
			b.serversSuspect = map[string]bool{}
		}
		b.serversSuspect[user] = true
	}
}

// ServerSettings is what the last read of user's servers said of server; ok is false when
// there was none, or the user does not see that server.
func (b *BulkReader) ServerSettings(user, server string) (settings coolify.ServerSettings, ok bool) {
	settings, _, ok = b.ServerSeen(user, server)
	return settings, ok
}

// ServerMissing reports whether api's user does not see server (NotFound): a read of the
// user's servers answered without it. The first time a read lacks it, the servers are read
// again at once, so that a read from before the server existed (one added to Coolify and to
// the pool together) never takes it out; after that the minute's reads tell, and the first
// that lists it ends the verdict.
func (b *BulkReader) ServerMissing(ctx context.Context, api CoolifyAPI, server string) bool {
	user := CoolifyUser(api)
	if _, read, listed := b.ServerSeen(user, server); !read || listed {
		b.mu.Lock()
		delete(b.missing, user+"|"+server)
		b.mu.Unlock()
		return false
	}
	b.mu.Lock()
	_, confirmed := b.missing[user+"|"+server]
	b.mu.Unlock()
	if !confirmed {
		if lister, ok := api.(serverLister); ok {
			b.readServers(ctx, lister, user, coolify.Housekeeping)
		}
		b.mu.Lock()
		if b.missing == nil {
			b.missing = map[string]bool{}
		}
		b.missing[user+"|"+server] = true
		b.mu.Unlock()
	}
	_, _, listed := b.ServerSeen(user, server)
	return !listed
}

// ServerSeen is ServerSettings that tells apart a user whose servers were never read (read
// false) from a read that did not list the server (read true, listed false).
func (b *BulkReader) ServerSeen(user, server string) (settings coolify.ServerSettings, read, listed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	snap, read := b.servers[user]
	settings, listed = snap.items[server]
	return settings, read, listed
}

// ServerRuns is how many deployments a server runs at once by its settings: concurrent_builds,
// or fewer when its queue holds fewer (every deployment is queued first, and a full queue
// refuses the next). 0 means unknown.
func ServerRuns(st coolify.ServerSettings) int {
	n := st.ConcurrentBuilds
	if n <= 0 {
		return 0
	}
	if q := st.DeploymentQueueLimit; q > 0 && q < n {
		n = q
	}
	return n
}

// CoolifyServer is the Coolify server a pool deploys to, as the pool's credentials see it.
type CoolifyServer struct {
	// Instance is the Coolify instance (its base URL): a full queue pauses an instance's server.
	Instance string
	// Key names the server for the deploy gate's per-server bound: instance, Coolify user and
	// server uuid. Server uuids are unique only per instance, and a pool may name any uuid:
	// with the user in the key, a tenant's pool naming another tenant's server (on another
	// instance, or in another team of the same one) never shares, and so never fills, its
	// gate; the pools of one user on one server share it.
	Key string
	// UUID is the server's uuid.
	UUID string
	// Runs is what the server runs at once (ServerRuns), 0 while unknown.
	Runs int
}

// ServerFor is server uuid as api's Coolify user sees it, with what its last read settings
// (in bulk) say it runs.
func ServerFor(api CoolifyAPI, bulk *BulkReader, uuid string) CoolifyServer {
	instance, user := coolifyInstance(api), CoolifyUser(api)
	srv := CoolifyServer{Instance: instance, Key: instance + "|" + user + "|" + uuid, UUID: uuid}
	if bulk == nil {
		return srv
	}
	if st, ok := bulk.ServerSettings(user, uuid); ok {
		srv.Runs = ServerRuns(st)
	}
	return srv
}

// ServerHealth is what the settings read of a server say of its health: read is false before
// any read of the user's servers succeeded, listed whether that read had this server.
func ServerHealth(st coolify.ServerSettings, read, listed bool) v1.ServerHealth {
	switch {
	case !read:
		return v1.ServerHealthUnknown
	case !listed:
		return v1.ServerNotFound
	case st.IsReachable != nil && !*st.IsReachable:
		return v1.ServerUnreachable
	case st.IsUsable != nil && !*st.IsUsable:
		return v1.ServerUnusable
	}
	return v1.ServerHealthy
}
