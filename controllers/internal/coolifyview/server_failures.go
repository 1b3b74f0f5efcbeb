package coolifyview

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
)

// Coolify may report a server reachable and usable while every deployment there fails: its
// registry or disk is gone, its Docker is broken. GET /servers does not tell; the pool's own
// starts do. A server on which the pool's last FailingAfter starts failed in a row (no start
// finished there in between) is Failing for that pool: out, like an unreachable one, until
// FailingCooldown after its last failure. Then it takes bots again; a start that fails there
// takes it out again at once (the run is not forgotten until a start finishes there or
// FailingForget passes).
//
// The mark is per pool: a tenant whose starts fail (its image, its registry login) never takes
// a server from another tenant. And it is never put on every Active server of a pool at once:
// when all of them fail, the pool's own image or settings are the likelier cause, and taking
// every server out would only turn the bots' failures into queue timeouts that say less.
// The runs live in the manager's memory: a restart forgets them, and the next failures tell
// again.
const ()

// failRun is the run of failed starts of one pool on one server since a start last finished
// there.
type failRun struct {
	failures int
	last     time.Time
}

func failKey(pool types.UID, server string) string { return string(pool) + "|" + server }

// StartEnded records how a start (a bot's deployment, or a standby container's) of the pool on
// server ended: failed for a reason a server explains (a deployment failed or lost, an
// application gone), or finished.
func (b *BulkReader) StartEnded(pool types.UID, server string, failed bool, now time.Time) {
	if server == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	key := failKey(pool, server)
	if !failed {
		delete(b.failing, key)
		return
	}
	if b.failing == nil {
		b.failing = map[string]*failRun{}
	}
	for k, run := range b.failing {
		if now.Sub(run.last) > policy.FailingForget {
			delete(b.failing, k)
		}
	}
	run := b.failing[key]
	if run == nil {
		run = &failRun{}
		b.failing[key] = run
	}
	run.failures++
	run.last = now
}

// failingRun is the run of failed starts of the pool on server, if it makes the server Failing
// now.
func (b *BulkReader) failingRun(pool types.UID, server string, now time.Time) (failRun, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	run, ok := b.failing[failKey(pool, server)]
	if !ok || run.failures < policy.FailingAfter || now.Sub(run.last) >= policy.FailingCooldown {
		return failRun{}, false
	}
	return *run, true
}

// MarkFailing turns the health of the pool's servers whose starts keep failing to Failing
// (health is this pass's read, by server uuid), unless that would leave no Active server of
// the pool in.
func (b *BulkReader) MarkFailing(pool *v1.BotPool, health map[string]v1.ServerHealth, now time.Time) {
	var failing []string
	in := 0
	for _, srv := range pool.Spec.Coolify.ServerList() {
		if health[srv.UUID].Out() {
			// Coolify says why the starts there fail: an outage's failures are not the
			// server's own, and must not keep it out once Coolify has it back.
			b.StartEnded(pool.UID, srv.UUID, false, now)
			continue
		}
		if srv.Cordoned {
			continue
		}
		in++
		if _, ok := b.failingRun(pool.UID, srv.UUID, now); ok {
			failing = append(failing, srv.UUID)
		}
	}
	if len(failing) == 0 || len(failing) == in {
		return
	}
	for _, uuid := range failing {
		health[uuid] = v1.ServerFailing
	}
}
