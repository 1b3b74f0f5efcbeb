package sim

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"botpool.dev/botpool/coolify"
)

// Coolify's Docker cleanup (App\Actions\Server\CleanupDocker), as it touches the image cache.
// It runs on a server:
//
//   - at every time of the server's docker_cleanup_frequency, a cron expression read on the
//     simulator's clock in UTC (not divided by Speed: it names times of day), when
//     force_docker_cleanup is set and the server is functional. Coolify's scheduler also runs it
//     without force once the disk passes docker_cleanup_threshold; the simulator's disks never
//     fill, so without force a scheduled run removes nothing;
//   - right after a stop or a delete whose docker_cleanup query flag is not false (it defaults
//     to true), on a functional server. A delete's runs before the application is gone.
//
// A run removes every cached image no running container of the server runs, except those each
// application of the server keeps: for an application whose repository is the image's, the
// images of its last DefaultImagesToKeep finished deployments. Coolify removes, application by
// application, the images of its repository that the application does not keep, so an image
// of a repository survives only if every application of that repository keeps it: the pool's
// puller keeps the image it just pulled, its slots, which have not deployed it yet, do not. An
// image of a repository no application uses goes unless it runs.

// Defaults of a server's Docker cleanup settings (Coolify's for a new server).
const (
	DefaultCleanupFrequency = coolify.DefaultCleanupFrequency
	DefaultCleanupThreshold = 80
	// DefaultImagesToKeep is how many of its latest deployments' images an application keeps
	// (docker_images_to_keep).
	DefaultImagesToKeep = 2
)

// DockerCleanup are a server's Docker cleanup settings, as GET /servers/{uuid}/docker-cleanup
// answers them.
type DockerCleanup struct {
	// Frequency is docker_cleanup_frequency: a cron expression or one of Coolify's names
	// for one (coolify.ParseCleanupFrequency). One the scheduler cannot read runs never.
	Frequency string
	// Threshold is docker_cleanup_threshold (percent); the simulator serves it, and its disks
	// never reach it.
	Threshold int
	// Force is force_docker_cleanup: every scheduled run prunes.
	Force bool
	// DisableImageRetention is disable_application_image_retention: applications keep no
	// image of their past deployments, only the running ones stay.
	DisableImageRetention bool
}

func defaultDockerCleanup() DockerCleanup {
	return DockerCleanup{Frequency: DefaultCleanupFrequency, Threshold: DefaultCleanupThreshold, Force: true}
}

// CleanupInfo describes one run of the Docker cleanup on a server.
type CleanupInfo struct {
	ServerUUID string
	// Reason is "scheduled", "stop" or "delete".
	Reason string
	// Evicted lists the image references it removed from the server's cache, sorted.
	Evicted []string
	// At is the simulated time of the run; Seq orders it among container changes and pulls.
	At  time.Time
	Seq uint64
}

// SetDockerCleanup changes a server's Docker cleanup settings, as PATCH
// /servers/{uuid}/docker-cleanup does, except that the frequency is taken as it is: a test may
// give one Coolify's scheduler cannot run. The next scheduled run follows the new frequency. It
// panics for a server that was never added.
func (s *Sim) SetDockerCleanup(serverUUID string, c DockerCleanup) {
	s.locked(func() {
		s.advance() // runs due under the old settings happen under them
		srv := s.mustServer(serverUUID)
		srv.cleanup = c
		srv.cleanupGen++
		s.scheduleCleanup(srv, s.clk.Now())
	})
}

// scheduleCleanup queues the server's next scheduled cleanup after from; one queued under
// older settings does nothing when it comes. Callers hold s.mu.
func (s *Sim) scheduleCleanup(srv *server, from time.Time) {
	sched, err := coolify.ParseCleanupFrequency(srv.cleanup.Frequency)
	if err != nil {
		return // Coolify's scheduler fails on it for every run: none happens
	}
	next := sched.Next(from)
	if next.IsZero() {
		return
	}
	gen := srv.cleanupGen
	s.at(next, func(at time.Time) {
		if srv.cleanupGen != gen || s.servers[srv.UUID] != srv {
			return
		}
		if srv.cleanup.Force && srv.functional() {
			s.dockerCleanup(srv, at, "scheduled")
		}
		s.scheduleCleanup(srv, next)
	})
}

// dockerCleanup runs the cleanup's image prune on srv. Callers hold s.mu.
func (s *Sim) dockerCleanup(srv *server, at time.Time, reason string) {
	running := map[string]string{} // ref -> digest of a running container
	for _, a := range srv.orphans {
		if a.running {
			running[a.run.ref] = a.run.digest
		}
	}
	var apps []*app
	for _, k := range sortedKeys(s.apps) {
		a := s.apps[k]
		if a.server != srv {
			continue
		}
		apps = append(apps, a)
		if a.running {
			running[a.run.ref] = a.run.digest
		}
	}
	var evicted []string
	for _, ref := range sortedKeys(srv.images) {
		digest := srv.images[ref]
		if d, ok := running[ref]; ok && d == digest {
			continue
		}
		repo, kept := repository(ref), true
		users := 0
		for _, a := range apps {
			if repository(imageRef(a.image, a.tag)) != repo {
				continue
			}
			users++
			if !s.keeps(a, srv, ref, digest) {
				kept = false
			}
		}
		if users == 0 || !kept {
			delete(srv.images, ref)
			evicted = append(evicted, ref)
		}
	}
	s.hookSeq++
	info := CleanupInfo{ServerUUID: srv.UUID, Reason: reason, Evicted: evicted, At: at, Seq: s.hookSeq}
	if h := s.cfg.Hooks.OnCleanup; h != nil {
		s.hooks = append(s.hooks, func() { h(info) })
	}
}

// keeps reports whether application a keeps ref at digest on srv: one of its last
// DefaultImagesToKeep finished deployments there pulled it. Callers hold s.mu.
func (s *Sim) keeps(a *app, srv *server, ref, digest string) bool {
	if srv.cleanup.DisableImageRetention {
		return false
	}
	n := 0
	deps := s.byApp[a.uuid]
	for i := len(deps) - 1; i >= 0 && n < DefaultImagesToKeep; i-- {
		d := deps[i]
		if d.status != depFinished || d.server != srv {
			continue
		}
		n++
		if d.ref == ref && d.digest == digest {
			return true
		}
	}
	return false
}

// repository is ref without its tag.
func repository(ref string) string {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i]
	}
	return ref
}

// queryFlag reads a boolean query flag as Laravel's $request->boolean does, def when absent:
// "1", "true", "on" and "yes" are true, anything else false.
func queryFlag(q url.Values, key string, def bool) bool {
	if _, ok := q[key]; !ok {
		return def
	}
	switch strings.ToLower(strings.TrimSpace(q.Get(key))) {
	case "1", "true", "on", "yes":
		return true
	}
	return false
}

// handleGetDockerCleanup is GET /servers/{uuid}/docker-cleanup; a release before 4.3.0 (whose
// published spec is the first to list it) answers it as an unknown path.
func handleGetDockerCleanup(s *Sim, rc *reqCtx) (int, any) {
	if !s.versionAtLeast("4.3.0") {
		return http.StatusNotFound, msgNotFound
	}
	srv := s.servers[rc.uuid()]
	if srv == nil {
		return http.StatusNotFound, msg{"message": "Server not found."}
	}
	c := srv.cleanup
	return http.StatusOK, msg{
		"docker_cleanup_frequency": c.Frequency, "docker_cleanup_threshold": c.Threshold,
		"force_docker_cleanup": c.Force, "delete_unused_volumes": false, "delete_unused_networks": false,
		"disable_application_image_retention": c.DisableImageRetention,
	}
}
