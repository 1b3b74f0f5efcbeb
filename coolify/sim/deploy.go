package sim

import (
	"time"
)

// Deployment statuses; the set is complete.
const (
	depQueued     = "queued"
	depInProgress = "in_progress"
	depFinished   = "finished"
	depFailed     = "failed"
	depCancelled  = "cancelled-by-user"
)

type deployment struct {
	id        int
	uuid      string
	app       *app
	server    *server
	status    string
	created   time.Time
	updated   time.Time
	finished  time.Time
	hasWorker bool
	gen       int
	restart   bool
	logs      []logLine

	// What the deployment read of its application as a worker took it (Coolify's job reads
	// the application then: a PATCH after that applies at the next deployment).
	image       string // the repository, as Docker names it in a refused pull
	ref, digest string
	cpus, mem   string
	cold        bool
	pullStarted time.Time
}

// logLine is one entry of a deployment's log, as Coolify stores it (its logs field is this
// list as a JSON string).
type logLine struct {
	at     time.Time
	output string
	stderr bool
}

func (d *deployment) log(at time.Time, output string, stderr bool) {
	d.logs = append(d.logs, logLine{at: at, output: output, stderr: stderr})
}

func (d *deployment) active() bool { return d.status == depQueued || d.status == depInProgress }

// queueResult is what queueing a deployment did.
type queueResult int

const (
	queued queueResult = iota
	deduplicated
	queueFull
)

// queueDeployment is Coolify's queue_application_deployment: one live deployment per app,
// at most deployment_queue_limit queued per server. Callers hold s.mu.
func (s *Sim) queueDeployment(a *app, restart bool, now time.Time) (*deployment, queueResult) {
	queuedOnServer := 0
	for _, d := range s.active {
		if d.app == a && d.active() {
			return d, deduplicated
		}
		if d.server == a.server && d.status == depQueued {
			queuedOnServer++
		}
	}
	if queuedOnServer >= a.server.DeploymentQueueLimit {
		return nil, queueFull
	}
	d := &deployment{id: s.id(), uuid: s.uuid(), app: a, server: a.server, status: depQueued,
		created: now, updated: now, restart: restart}
	s.deploys[d.uuid] = d
	s.active = append(s.active, d)
	s.order = append(s.order, d)
	s.byApp[a.uuid] = append(s.byApp[a.uuid], d)
	return d, queued
}

// schedule promotes queued deployments while their server has build slots, then gives
// in-progress ones a worker while the instance has one: a deployment can sit in_progress
// without a worker, as on a busy real instance. Callers hold s.mu.
func (s *Sim) schedule(at time.Time) {
	// A deployment that fails as a worker takes it (its server is not functional) frees its
	// build slot and worker at once: schedule again until none does.
	for s.scheduleOnce(at) {
	}
}

// scheduleOnce is one pass of schedule; it reports whether a deployment failed at pickup.
func (s *Sim) scheduleOnce(at time.Time) (freed bool) {
	live := s.active[:0]
	for _, d := range s.active {
		if d.active() {
			live = append(live, d)
		}
	}
	clear(s.active[len(live):])
	s.active = live

	building := map[*server]int{}
	for _, d := range s.active {
		if d.status == depInProgress {
			building[d.server]++
		}
	}
	for _, d := range s.active {
		if d.status == depQueued && building[d.server] < d.server.ConcurrentBuilds {
			d.status, d.updated = depInProgress, at
			building[d.server]++
		}
	}
	for _, d := range s.active {
		if s.workers >= s.cfg.Workers {
			break
		}
		if d.status == depInProgress && !d.hasWorker {
			if !d.server.functional() {
				// Coolify's deployment job checks its server first and gives up.
				s.fail(d, at, logNotFunctional)
				freed = true
				continue
			}
			s.run(d, at)
		}
	}
	return freed
}

// run gives d a worker: pull (cold unless the server holds the registry's digest of the
// image), then compose up. A pull asked to fail (FailPulls) fails PullFailAfter into the pull.
func (s *Sim) run(d *deployment, at time.Time) {
	d.hasWorker = true
	s.workers++
	d.image, d.ref = d.app.image, imageRef(d.app.image, d.app.tag)
	d.cpus, d.mem = d.app.cpus, d.app.mem
	d.digest = s.digest(d.ref)
	d.cold = d.server.images[d.ref] != d.digest
	d.pullStarted = at
	pull := s.cfg.WarmPull
	if d.cold {
		pull = s.cfg.ColdPull
	}
	s.pullHook(s.cfg.Hooks.OnPull, d, at)
	gen := d.gen
	// The failure check is scheduled first: at the same moment as the end of the pull and
	// compose up (a pull shorter than PullFailAfter, no compose-up time), it comes first.
	s.after(at, min(s.cfg.PullFailAfter, pull), func(at time.Time) {
		if d.gen != gen || d.status != depInProgress {
			return
		}
		if line, failed := s.takePullFailure(d.server, d.image, d.ref); failed {
			s.failPull(d, at, line)
		}
	})
	s.after(at, pull+s.cfg.ComposeUp, func(at time.Time) {
		if d.gen != gen || d.status != depInProgress {
			return
		}
		s.release(d)
		d.updated, d.finished = at, at
		d.server.images[d.ref] = d.digest
		d.status = depFinished
		s.pullHook(s.cfg.Hooks.OnPulled, d, at)
		if _, exists := s.apps[d.app.uuid]; exists {
			s.startContainer(d.app, d, at)
		}
	})
}

// pullHook queues h (OnPull or OnPulled) with d's pull at at. Callers hold s.mu.
func (s *Sim) pullHook(h func(PullInfo), d *deployment, at time.Time) {
	if h == nil {
		return
	}
	s.hookSeq++
	p := PullInfo{DeploymentUUID: d.uuid, AppUUID: d.app.uuid, AppName: d.app.name, ServerUUID: d.server.UUID,
		Ref: d.ref, Digest: d.digest, Cold: d.cold, At: at, Seq: s.hookSeq}
	s.hooks = append(s.hooks, func() { h(p) })
}

// Lines Coolify's deployment job writes around the error of a failed command.
const (
	logOops           = "Oops something is not okay, are you okay? 😢"
	logRemovedVersion = "Deployment failed. Removing the new version of your application."
)

// failPull fails d with Docker's error, logged the way Coolify's job logs a failed command:
// its marker, the error (stderr), then its cleanup line. The cache stays as it was.
func (s *Sim) failPull(d *deployment, at time.Time, line string) {
	d.log(at, logOops, true)
	s.fail(d, at, line)
	d.log(at, logRemovedVersion, false)
}

func (s *Sim) release(d *deployment) {
	if d.hasWorker {
		d.hasWorker = false
		s.workers--
	}
}

// fail ends a live deployment as failed with a last log line. Callers hold s.mu.
func (s *Sim) fail(d *deployment, at time.Time, line string) {
	s.release(d)
	d.gen++ // its pending pull-and-up event does nothing
	d.status, d.updated, d.finished = depFailed, at, at
	d.log(at, line, true)
}

// cancel stops a live deployment. Callers hold s.mu.
func (s *Sim) cancel(d *deployment, at time.Time) {
	s.release(d)
	d.gen++
	d.status, d.updated, d.finished = depCancelled, at, at
}

// DeploymentInfo is the simulator's view of a deployment, for assertions.
type DeploymentInfo struct {
	UUID       string
	AppUUID    string
	ServerUUID string
	Status     string
	HasWorker  bool
	Created    time.Time
	Finished   time.Time
	// Logs are the deployment's log lines (a failure's reason is its last stderr line).
	Logs []string
	// Ref, Digest, Cold and PullStarted describe the pull (PullInfo); all zero until a
	// worker took the deployment.
	Ref         string
	Digest      string
	Cold        bool
	PullStarted time.Time
	// CPUs and Memory are the limits the deployment read (limits_cpus, limits_memory).
	CPUs   string
	Memory string
}

// Deployments lists every deployment in creation order.
func (s *Sim) Deployments() []DeploymentInfo {
	s.mu.Lock()
	s.advance()
	hooks := s.takeHooks()
	out := make([]DeploymentInfo, 0, len(s.order))
	for _, d := range s.order {
		info := DeploymentInfo{UUID: d.uuid, AppUUID: d.app.uuid, ServerUUID: d.server.UUID,
			Status: d.status, HasWorker: d.hasWorker, Created: d.created, Finished: d.finished,
			Ref: d.ref, Digest: d.digest, Cold: d.cold, PullStarted: d.pullStarted, CPUs: d.cpus, Memory: d.mem}
		for _, l := range d.logs {
			info.Logs = append(info.Logs, l.output)
		}
		out = append(out, info)
	}
	s.mu.Unlock()
	runHooks(hooks)
	return out
}
