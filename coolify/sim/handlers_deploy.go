package sim

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

const (
	msgQueued    = "Deployment request queued."
	msgDuplicate = "Deployment already queued for this commit."
)

func handleStart(s *Sim, rc *reqCtx) (int, any) { return s.startLike(rc, false, msgQueued) }

func handleRestart(s *Sim, rc *reqCtx) (int, any) {
	return s.startLike(rc, true, "Restart request queued.")
}

// startLike answers /start and /restart, with both of their traps: no deployment_uuid when
// de-duplicated, and a uuid that was never created when the server's queue is full.
func (s *Sim) startLike(rc *reqCtx, restart bool, queuedMsg string) (int, any) {
	a := s.apps[rc.uuid()]
	if a == nil {
		return http.StatusNotFound, msgAppNotFound
	}
	d, res := s.queueDeployment(a, restart, rc.now)
	switch res {
	case deduplicated:
		return http.StatusOK, msg{"message": msgDuplicate}
	case queueFull:
		return http.StatusOK, msg{"message": queuedMsg, "deployment_uuid": s.uuid()}
	}
	return http.StatusOK, msg{"message": queuedMsg, "deployment_uuid": d.uuid}
}

func handleStop(s *Sim, rc *reqCtx) (int, any) {
	a := s.apps[rc.uuid()]
	if a == nil {
		return http.StatusNotFound, msgAppNotFound
	}
	// A stop is a queued job: docker stop with a grace period, then rm, then the server's
	// Docker cleanup unless docker_cleanup is false. It leaves deployments in flight alone,
	// which can bring the container back. The job gives up when the server is not functional
	// as it runs: the stop is lost, not kept for later.
	cleanup := queryFlag(rc.r.URL.Query(), "docker_cleanup", true)
	s.after(rc.now, s.cfg.StopDelay, func(at time.Time) {
		if a.server.functional() {
			s.stopContainer(a, at, "stopped")
			if cleanup {
				s.dockerCleanup(a.server, at, "stop")
			}
		}
	})
	return http.StatusOK, msg{"message": "Application stopping request queued."}
}

// handleDeploy is POST /deploy?uuid=a,b or ?tag=t. A full queue is a 429 for the whole call.
func handleDeploy(s *Sim, rc *reqCtx) (int, any) {
	q := rc.r.URL.Query()
	var targets []*app
	switch {
	case q.Get("uuid") != "":
		for _, u := range strings.Split(q.Get("uuid"), ",") {
			if a := s.apps[strings.TrimSpace(u)]; a != nil {
				targets = append(targets, a)
			}
		}
	case q.Get("tag") != "":
		for _, k := range sortedKeys(s.apps) {
			if a := s.apps[k]; containsAny(a.tags, strings.Split(q.Get("tag"), ",")) {
				targets = append(targets, a)
			}
		}
	default:
		return http.StatusBadRequest, msg{"message": "You must provide uuid or tag."}
	}
	if len(targets) == 0 {
		return http.StatusNotFound, msg{"message": "No resources found."}
	}
	out := make([]msg, 0, len(targets))
	for _, a := range targets {
		d, res := s.queueDeployment(a, false, rc.now)
		switch res {
		case queueFull:
			rc.header.Set("Retry-After", "60")
			return http.StatusTooManyRequests, msg{"message": "Deployment queue is full. Please wait for existing deployments to complete."}
		case deduplicated:
			out = append(out, msg{"message": a.name + ": " + msgDuplicate, "resource_uuid": a.uuid})
		default:
			out = append(out, msg{"message": "Application " + a.name + " deployment queued.",
				"resource_uuid": a.uuid, "deployment_uuid": d.uuid})
		}
	}
	return http.StatusOK, msg{"deployments": out}
}

func containsAny(have, want []string) bool {
	for _, w := range want {
		for _, h := range have {
			if h == strings.TrimSpace(w) {
				return true
			}
		}
	}
	return false
}

func handleListDeployments(s *Sim, rc *reqCtx) (int, any) {
	out := make([]msg, 0, len(s.active))
	for _, d := range s.order {
		if d.active() {
			out = append(out, deploymentJSON(d, rc.can("read:sensitive")))
		}
	}
	return http.StatusOK, out
}

func handleGetDeployment(s *Sim, rc *reqCtx) (int, any) {
	d := s.deploys[rc.uuid()]
	if d == nil {
		return http.StatusNotFound, msg{"message": "Deployment not found."}
	}
	return http.StatusOK, deploymentJSON(d, rc.can("read:sensitive"))
}

func handleAppDeployments(s *Sim, rc *reqCtx) (int, any) {
	a := s.apps[rc.uuid()]
	if a == nil {
		return http.StatusNotFound, msgAppNotFoundNoStop
	}
	q := rc.r.URL.Query()
	skip, take := atoiDefault(q.Get("skip"), 0), atoiDefault(q.Get("take"), 10)
	list := s.byApp[a.uuid]
	out := []msg{}
	for i := len(list) - 1 - max(skip, 0); i >= 0 && len(out) < max(take, 1); i-- {
		out = append(out, deploymentJSON(list[i], rc.can("read:sensitive")))
	}
	return http.StatusOK, msg{"count": len(list), "deployments": out}
}

func atoiDefault(s string, def int) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return def
}

func handleCancel(s *Sim, rc *reqCtx) (int, any) {
	d := s.deploys[rc.uuid()]
	if d == nil {
		return http.StatusNotFound, msg{"message": "Deployment not found."}
	}
	if !d.active() {
		return http.StatusBadRequest, msg{"message": "Deployment cannot be cancelled. Current status: " + d.status}
	}
	s.cancel(d, rc.now)
	return http.StatusOK, msg{"message": "Deployment cancelled successfully.", "deployment_uuid": d.uuid, "status": d.status}
}
