package sim

import (
	"maps"
	"sort"
	"time"
)

// Statuses a single-container image app reports (docs/coolify.md).
const (
	statusExited     = "exited:unhealthy"
	statusRunning    = "running:unknown"
	statusRestarting = "restarting:unknown"
)

type app struct {
	id          int
	uuid        string
	name        string
	description string
	image, tag  string
	ports       string
	cpus, mem   string
	tags        []string
	server      *server
	projectUUID string
	envUUID     string
	envID       int
	destUUID    string
	created     time.Time
	updated     time.Time
	envs        []*envVar

	// history is the container's true status over time; the API shows it StatusLag late.
	history []statusChange
	running bool
	// run is what the container runs (set at each start): the image and limits of the
	// deployment that started it, which later PATCHes do not change.
	run      runConfig
	gen      int // bumps at each start/stop so stale crash events do nothing
	deleting bool
	restarts int
}

type runConfig struct{ ref, digest, cpus, mem string }

type statusChange struct {
	at     time.Time
	status string
}

type envVar struct {
	id        int
	uuid      string
	key       string
	value     string
	preview   bool
	literal   bool
	multiline bool
	created   time.Time
	updated   time.Time
}

// visibleStatus is what GET answers: the true status as it was StatusLag ago, or, while the
// app's server is not functional, as it was StatusLag before the server went: Coolify's status
// check skips such a server, so the last status it saw stays.
func (s *Sim) visibleStatus(a *app, now time.Time) string {
	seen := now
	if !a.server.downSince.IsZero() && a.server.downSince.Before(seen) {
		seen = a.server.downSince
	}
	cut := seen.Add(-s.scaled(s.cfg.StatusLag))
	status := statusExited
	for _, c := range a.history {
		if c.at.After(cut) {
			break
		}
		status = c.status
	}
	return status
}

func (a *app) trueStatus() string {
	if len(a.history) == 0 {
		return statusExited
	}
	return a.history[len(a.history)-1].status
}

func (a *app) setStatus(at time.Time, status string) {
	a.history = append(a.history, statusChange{at: at, status: status})
	// Old changes no one can see any more are dropped, keeping the last visible one.
	if len(a.history) > 64 {
		a.history = a.history[len(a.history)-32:]
	}
}

func (a *app) envMap() map[string]string {
	m := map[string]string{}
	for _, e := range a.envs {
		if !e.preview {
			m[e.key] = e.value
		}
	}
	return m
}

func (s *Sim) container(a *app, reason string, at time.Time) Container {
	s.hookSeq++
	return Container{AppUUID: a.uuid, AppName: a.name, ServerUUID: a.server.UUID,
		Image: a.run.ref, CPUs: a.run.cpus, Memory: a.run.mem, Env: a.envMap(), Reason: reason, At: at, Seq: s.hookSeq}
}

// startContainer makes the container of deployment d run from at, replacing a running one.
func (s *Sim) startContainer(a *app, d *deployment, at time.Time) {
	reason := "deployed"
	if a.running {
		s.stopContainer(a, at, "redeployed")
		reason = "redeployed"
	}
	a.running = true
	a.run = runConfig{ref: d.ref, digest: d.digest, cpus: d.cpus, mem: d.mem}
	a.gen++
	a.setStatus(at, statusRunning)
	c := s.container(a, reason, at)
	if h := s.cfg.Hooks.OnStart; h != nil {
		s.hooks = append(s.hooks, func() { h(c) })
	}
	if cr, ok := s.crashFor(a); ok {
		gen := a.gen
		s.after(at, cr.After, func(at time.Time) {
			if a.gen != gen || !a.running {
				return
			}
			if cr.Loop {
				a.restarts++
				a.setStatus(at, statusRestarting)
				s.stopHook(a, "crash-loop", at)
				return
			}
			s.stopContainer(a, at, "crashed")
		})
	}
}

// stopContainer removes the container at at.
func (s *Sim) stopContainer(a *app, at time.Time, reason string) {
	if !a.running {
		return
	}
	a.running = false
	a.gen++
	a.setStatus(at, statusExited)
	s.stopHook(a, reason, at)
}

func (s *Sim) stopHook(a *app, reason string, at time.Time) {
	c := s.container(a, reason, at)
	if h := s.cfg.Hooks.OnStop; h != nil {
		s.hooks = append(s.hooks, func() { h(c) })
	}
}

// AppInfo is the simulator's view of an application, for assertions.
type AppInfo struct {
	UUID        string
	Name        string
	Description string
	ServerUUID  string
	Image       string
	// LimitsCPUs and LimitsMemory are the limits set (created or PATCHed; "" for none): a
	// container runs with those of the deployment that started it (Container).
	LimitsCPUs   string
	LimitsMemory string
	Tags         []string
	// Status is what the API shows now; TrueStatus is the container's actual state.
	Status     string
	TrueStatus string
	Running    bool
	Deleting   bool
	Restarts   int
	// Env holds the non-preview variables; EnvRows counts every row, preview twins included.
	Env     map[string]string
	EnvRows int
}

func (s *Sim) appInfo(a *app, now time.Time) AppInfo {
	return AppInfo{UUID: a.uuid, Name: a.name, Description: a.description, ServerUUID: a.server.UUID,
		Image: imageRef(a.image, a.tag), LimitsCPUs: a.cpus, LimitsMemory: a.mem, Tags: append([]string(nil), a.tags...),
		Status: s.visibleStatus(a, now), TrueStatus: a.trueStatus(), Running: a.running,
		Deleting: a.deleting, Restarts: a.restarts, Env: maps.Clone(a.envMap()), EnvRows: len(a.envs)}
}

// Apps lists the applications that still exist (deleting ones included), sorted by name, then
// uuid.
func (s *Sim) Apps() []AppInfo {
	s.mu.Lock()
	s.advance()
	hooks := s.takeHooks()
	now := s.clk.Now()
	out := make([]AppInfo, 0, len(s.apps))
	for _, a := range s.apps {
		out = append(out, s.appInfo(a, now))
	}
	s.mu.Unlock()
	runHooks(hooks)
	// By name, then uuid: names repeat (each pool has a puller of the same name on a server),
	// and a caller that picks from the list (the model check) must get the same order every run.
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name == out[j].Name {
			return out[i].UUID < out[j].UUID
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// App returns one application.
func (s *Sim) App(uuid string) (AppInfo, bool) {
	s.mu.Lock()
	s.advance()
	hooks := s.takeHooks()
	a, ok := s.apps[uuid]
	var info AppInfo
	if ok {
		info = s.appInfo(a, s.clk.Now())
	}
	s.mu.Unlock()
	runHooks(hooks)
	return info, ok
}
