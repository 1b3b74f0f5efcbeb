package sim

import (
	"strings"
	"time"
)

// Fault injects failures into one operation (the spec's operationId, e.g.
// "get-application-by-uuid") or, under the key "*", into every operation.
type Fault struct {
	// ErrorRate is the fraction of requests answered 500 {"message":"Server Error"}.
	ErrorRate float64
	// Latency is real time added before answering (not scaled: keep it small in tests).
	Latency time.Duration
	// Burst answers the next Burst requests with BurstCode (default 500), then stops.
	Burst     int
	BurstCode int
	// AfterProcessing makes the injected errors happen after the request took effect, like
	// a proxy timing out on a create that succeeded.
	AfterProcessing bool
	// RetryAfter, when set, is sent as the Retry-After header (in seconds) of the injected
	// errors, as Coolify's throttle does on a 429 (a hostile server may ask for a year).
	RetryAfter time.Duration
}

// Crash makes containers of matching images die after they start.
type Crash struct {
	After time.Duration
	// Loop leaves the container restarting (status restarting:unknown) instead of exited.
	Loop bool
}

// SetFault sets the fault of an operation ("*" for all); a zero Fault clears it.
func (s *Sim) SetFault(op string, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f == (Fault{}) {
		delete(s.faults, op)
		return
	}
	if f.BurstCode == 0 {
		f.BurstCode = 500
	}
	s.faults[op] = &f
}

// SetOutage makes every request, /health included, answer 503 while on.
func (s *Sim) SetOutage(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outage = on
}

// FailPulls makes the next n deployments of image (with tag, e.g. "bot:1", or without for
// "latest") fail at the pull, on any server, as a tag missing from the registry does; n < 0
// fails them all until called again with 0. The pull fails Config.PullFailAfter after it
// started (a cached image too: every deployment asks the registry), leaves the server's cache
// as it was, and logs Docker's "manifest for <image:tag> not found".
func (s *Sim) FailPulls(image string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pullFails[pullKey{ref: pullRef(image)}] = n
}

// FailPullsOn is FailPulls on one server only, as a registry login missing there does: the
// image's deployments to other servers pull as usual, and the log says Docker's "pull access
// denied ... may require 'docker login'". A deployment uses up its server's count before
// FailPulls' one. It panics for a server that was never added.
func (s *Sim) FailPullsOn(serverUUID, image string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mustServer(serverUUID)
	s.pullFails[pullKey{server: serverUUID, ref: pullRef(image)}] = n
}

// pullKey names a pull failure switch: server "" is every server.
type pullKey struct{ server, ref string }

func pullRef(image string) string {
	if !strings.Contains(lastSegment(image), ":") {
		image += ":latest"
	}
	return image
}

// CrashContainers makes containers whose image reference starts with prefix crash after
// starting; a zero Crash clears it.
func (s *Sim) CrashContainers(prefix string, c Crash) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c == (Crash{}) {
		delete(s.crashes, prefix)
		return
	}
	s.crashes[prefix] = c
}

func (s *Sim) crashFor(a *app) (Crash, bool) {
	ref := a.run.ref
	for _, p := range sortedKeys(s.crashes) {
		if strings.HasPrefix(ref, p) {
			return s.crashes[p], true
		}
	}
	return Crash{}, false
}

// takePullFailure uses up a pull failure of ref on srv, if one is asked for, and returns the
// error Docker prints for it: a login missing on the server (FailPullsOn) or a tag missing
// from the registry (FailPulls). Callers hold s.mu.
func (s *Sim) takePullFailure(srv *server, image, ref string) (string, bool) {
	for _, k := range []pullKey{{server: srv.UUID, ref: ref}, {ref: ref}} {
		n := s.pullFails[k]
		if n == 0 {
			continue
		}
		if n > 0 {
			s.pullFails[k] = n - 1
		}
		if k.server != "" {
			return "Error response from daemon: pull access denied for " + image +
				", repository does not exist or may require 'docker login': denied: requested access to the resource is denied", true
		}
		return "Error response from daemon: manifest for " + ref + " not found: manifest unknown: manifest unknown", true
	}
	return "", false
}

// injected decides whether a request to op fails and with which code, and how long to delay.
// Callers hold s.mu.
func (s *Sim) injected(op string) (code int, after bool, latency, retryAfter time.Duration) {
	for _, key := range []string{op, "*"} {
		f := s.faults[key]
		if f == nil {
			continue
		}
		latency += f.Latency
		if code != 0 {
			continue
		}
		switch {
		case f.Burst > 0:
			f.Burst--
			code, after, retryAfter = f.BurstCode, f.AfterProcessing, f.RetryAfter
		case f.ErrorRate > 0 && s.rng.Float64() < f.ErrorRate:
			code, after, retryAfter = 500, f.AfterProcessing, f.RetryAfter
		}
	}
	return code, after, latency, retryAfter
}

func lastSegment(image string) string {
	return image[strings.LastIndex(image, "/")+1:]
}
