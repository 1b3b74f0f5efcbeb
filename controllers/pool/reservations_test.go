package pool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestWarming: the k-th pending reservation (by start) is warmed once its start is within the
// lead of k slots, and every one before it with it; the pool looks again when the next is.
func TestWarming(t *testing.T) {
	now := time.Date(2026, 11, 27, 13, 30, 0, 0, time.UTC)
	at := func(m ...int) []time.Time {
		var out []time.Time
		for _, x := range m {
			out = append(out, now.Add(time.Duration(x)*time.Minute))
		}
		return out
	}
	// 2 at once, a minute each, no pull: lead(1..2) = 1m+2m, lead(3..4) = 2m+2m, lead(5..6) = 3m+2m.
	warm := leadModel{start: time.Minute, parallel: 2}
	cold := leadModel{pull: 7 * time.Minute, start: time.Minute, parallel: 2}
	tests := []struct {
		name   string
		starts []time.Time
		m      leadModel
		want   int
		next   time.Duration // from now; 0: none
	}{
		{"none pending", nil, warm, 0, 0},
		{"one far ahead", at(30), warm, 0, 27 * time.Minute},
		{"one within its lead", at(3), warm, 1, 0},
		{"one already due (its bot not queued yet)", at(-1), warm, 1, 0},
		{"six at one start need three batches", at(5, 5, 5, 5, 5, 5), warm, 6, 0},
		{"six at one start, a minute before their lead: all begin together", at(6, 6, 6, 6, 6, 6), warm, 0, time.Minute},
		{"a later one does not hold back an earlier", at(3, 30), warm, 1, 27 * time.Minute},
		{"a cold pull makes the lead 10m", at(11, 20), cold, 0, time.Minute},
		{"the pull inside the lead", at(10, 20), cold, 1, 10 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, next := warming(tt.starts, now, tt.m)
			if n != tt.want {
				t.Errorf("warming %d, want %d", n, tt.want)
			}
			var gotNext time.Duration
			if !next.IsZero() {
				gotNext = next.Sub(now)
			}
			if gotNext != tt.next {
				t.Errorf("next in %s, want %s", gotNext, tt.next)
			}
		})
	}
}

// TestObservedLead: the lead of a pool's reservations follows what it observed on the servers
// that take slots: the newest pull where the image is missing (less what a pull in flight has
// done), the slowest standby start, what the servers and the pool's deploy bound run at once;
// with nothing observed, the pessimistic defaults.
func TestObservedLead(t *testing.T) {
	now := time.Date(2026, 11, 27, 13, 30, 0, 0, time.UTC)
	const ref = "ghcr.io/acme/bot:v2"
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }
	cached := func(image string, took time.Duration) []v1.CachedImage {
		return []v1.CachedImage{{Image: image, PulledAt: metav1.NewTime(now.Add(-time.Hour)), PullDuration: d(took)}}
	}
	srv := func(uuid string, mutate ...func(*v1.ServerStatus)) v1.ServerStatus {
		st := v1.ServerStatus{UUID: uuid, State: v1.ServerActive, Health: v1.ServerHealthy}
		for _, m := range mutate {
			m(&st)
		}
		return st
	}
	warm := func(st *v1.ServerStatus) { st.Cached, st.SlotStart = cached(ref, 7*time.Minute), d(20*time.Second) }
	lacks := func(st *v1.ServerStatus) {
		st.Cached, st.SlotStart = cached("ghcr.io/acme/bot:v1", 6*time.Minute), d(20*time.Second)
	}
	settings := map[string]coolify.ServerSettings{"s1": {ConcurrentBuilds: 2}, "s2": {ConcurrentBuilds: 3}}
	tests := []struct {
		name    string
		mode    v1.StandbyMode
		limit   int32
		servers []v1.ServerStatus
		known   map[string]coolify.ServerSettings
		want    leadModel
	}{
		{"nothing observed yet", v1.StandbyRunning, 0, nil, nil, leadModel{pull: unobservedPull, start: unobservedStart, parallel: unobservedRuns}},
		{"image on both servers: their starts, their builds", v1.StandbyRunning, 0, []v1.ServerStatus{srv("s1", warm), srv("s2", warm)}, settings,
			leadModel{start: 20 * time.Second, parallel: 5}},
		{"a server without the image: its last pull", v1.StandbyRunning, 0, []v1.ServerStatus{srv("s1", warm), srv("s2", lacks)}, settings,
			leadModel{pull: 6 * time.Minute, start: 20 * time.Second, parallel: 5}},
		{"a pull two minutes in", v1.StandbyRunning, 0, []v1.ServerStatus{srv("s1", lacks, func(st *v1.ServerStatus) {
			st.Pull = &v1.ImagePull{Image: ref, State: v1.ImagePulling, Since: metav1.NewTime(now.Add(-2 * time.Minute))}
		})}, settings, leadModel{pull: 4 * time.Minute, start: 20 * time.Second, parallel: 2}},
		{"a restartedAt dropped the pull's cached entry: the last pull observed there, two minutes in", v1.StandbyRunning, 0, []v1.ServerStatus{srv("s1", func(st *v1.ServerStatus) {
			st.PullDuration, st.SlotStart = d(7*time.Minute), d(20*time.Second)
			st.Pull = &v1.ImagePull{Image: ref, State: v1.ImagePulling, Since: metav1.NewTime(now.Add(-2 * time.Minute))}
		})}, settings, leadModel{pull: 5 * time.Minute, start: 20 * time.Second, parallel: 2}},
		{"never pulled there, no start seen", v1.StandbyRunning, 0, []v1.ServerStatus{srv("s1")}, settings,
			leadModel{pull: unobservedPull, start: unobservedStart, parallel: 2}},
		{"a cordoned and an out server do not count", v1.StandbyRunning, 0, []v1.ServerStatus{srv("s1", warm),
			srv("s2", lacks, func(st *v1.ServerStatus) { st.State = v1.ServerCordoned }),
			srv("s3", func(st *v1.ServerStatus) { st.Health = v1.ServerUnreachable })}, settings, leadModel{start: 20 * time.Second, parallel: 2}},
		{"the pool's deploy bound", v1.StandbyRunning, 1, []v1.ServerStatus{srv("s1", warm), srv("s2", warm)}, settings,
			leadModel{start: 20 * time.Second, parallel: 1}},
		{"settings unknown: 2 a server, 4 for the pool", v1.StandbyRunning, 0, []v1.ServerStatus{srv("s1", warm), srv("s2", warm), srv("s3", warm)}, nil,
			leadModel{start: 20 * time.Second, parallel: 4}},
		{"a Stopped pool's free slot starts nothing", v1.StandbyStopped, 0, []v1.ServerStatus{srv("s1", warm)}, settings, leadModel{parallel: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := bt.MakePool("ns", "pool").Image("ghcr.io/acme/bot", "v2").Standby(tt.mode).MaxConcurrentDeployments(tt.limit).Obj()
			tmpl := policy.PoolTemplate(pool, "", "")
			s := &poolScope{pool: pool, template: &tmpl, servers: tt.known}
			if got := observedLead(s, tt.servers, now); got != tt.want {
				t.Errorf("lead model %+v, want %+v", got, tt.want)
			}
		})
	}
	// A pull requested at a fraction of a second, its since stored to the second: no time has
	// passed, so none of it is gone (TestReservationWarmedByTheObservedLead failed in the full
	// suite, whose shared clock had a fraction, as the lead dropped a minute).
	at := now.Add(700 * time.Millisecond)
	pulling := srv("s1", lacks, func(st *v1.ServerStatus) {
		st.Pull = &v1.ImagePull{Image: ref, State: v1.ImagePulling, Since: metav1.NewTime(at.Truncate(time.Second))}
	})
	pool := bt.MakePool("ns", "pool").Image("ghcr.io/acme/bot", "v2").Obj()
	tmpl := policy.PoolTemplate(pool, "", "")
	if got := observedLead(&poolScope{pool: pool, template: &tmpl, servers: settings}, []v1.ServerStatus{pulling}, at); got.pull != 6*time.Minute {
		t.Errorf("a pull just requested at a fraction of a second has %s left, want all of its 6m", got.pull)
	}
}
