package modelcheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/botapi/botclient"
	"botpool.dev/botpool/coolify/sim"
)

// container is a bot container the simulator runs: it knows only its environment (the slot's
// application uuid and token) and speaks only the bot API, like a real bot image: the slot's
// token fetches the config, whose binding credential (cred) the bot calls carry.
type container struct {
	seq              uint64 // the simulator's, increasing with every container start
	asked            bool   // the bot API took one of its config calls (it authenticated)
	app, slot, token string
	cred             string // from its config; empty until it fetched one
	bot              string // from its config; empty until it fetched one
	phase            v1.BotPhase
	leave            bool // a heartbeat told it to leave
	silent           bool // stopped calling (hung, network cut)
	exited           bool // done with its bot: makes no more calls
}

func (w *world) containerStarted(c sim.Container) {
	if c.Env[botclient.PrePullEnv] == "1" {
		return // a pool's image pre-pull: no slot, no bot, and the pool stops it
	}
	w.cmu.Lock()
	defer w.cmu.Unlock()
	ct := &container{seq: c.Seq, app: c.AppUUID, slot: c.AppName, token: c.Env["BOTPOOL_SLOT_TOKEN"]}
	w.containers[c.AppUUID] = ct
	w.lastStart[c.AppUUID] = c.At
	w.containerStartedForStandby(ct)
}

func (w *world) containerStopped(c sim.Container) {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	delete(w.containers, c.AppUUID)
}

// runningContainers lists the containers that run now, in a stable order.
func (w *world) runningContainers() []*container {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	out := make([]*container, 0, len(w.containers))
	for _, c := range w.containers {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].app < out[j].app })
	return out
}

func (w *world) running(app string) bool {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	return w.containers[app] != nil
}

// call sends one request to the bot API's handler.
func (w *world) call(method, path, token string, body any) (int, []byte) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		must(err)
		rd = bytes.NewReader(b)
	}
	req := httptest.NewRequestWithContext(w.ctx, method, path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	w.op.botAPI.ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

// fetchConfig asks which bot the slot serves.
func (w *world) fetchConfig(c *container) {
	w.counts["bot-api config"]++
	code, body := w.call(http.MethodGet, "/v1/slots/"+c.app+"/config", c.token, nil)
	if code != http.StatusUnauthorized && code != http.StatusTooManyRequests {
		c.asked = true
	}
	switch code {
	case http.StatusOK:
		var cfg botclient.Config
		must(json.Unmarshal(body, &cfg))
		w.containerServes(c, cfg.Bot)
		if cfg.Bot != c.bot {
			c.bot, c.phase, c.leave = cfg.Bot, "", false
		}
		c.cred = cfg.Credential
	case http.StatusGone:
		c.exited = true
	}
}

// heartbeat beats for the container's bot and follows the answer.
func (w *world) heartbeat(c *container) {
	w.counts["bot-api heartbeat"]++
	w.checkAliveTimer(c.bot)
	code, body := w.call(http.MethodPost, "/v1/bots/"+c.bot+"/heartbeat", c.cred, nil)
	switch code {
	case http.StatusOK:
		w.beats[c.bot] = w.clk.Now()
		var hb botclient.HeartbeatResponse
		must(json.Unmarshal(body, &hb))
		switch hb.Action {
		case botclient.ActionLeave:
			c.leave = true
		case botclient.ActionExit:
			c.exited = true
		}
	case http.StatusForbidden:
		c.bot = "" // no longer this slot's bot: ask again
	case http.StatusGone, http.StatusUnauthorized:
		// The binding ended (410: its bot ended and the slot let go of it): its credential is
		// refused from then on.
		c.exited = true
	}
}

// reportPhase sends the next phase of the container's meeting: joining, maybe a waiting room, in
// the call; once told to leave, Leaving, CallEnded and Done.
func (w *world) reportPhase(c *container) {
	var next v1.BotPhase
	switch {
	case c.leave && c.phase != v1.BotLeaving && c.phase != v1.BotCallEnded:
		next = v1.BotLeaving
	case c.leave && c.phase == v1.BotLeaving:
		next = v1.BotCallEnded
	case c.leave:
		next = v1.BotDone
	case c.phase == "":
		next = v1.BotJoiningCall
	case c.phase == v1.BotJoiningCall && w.rng.IntN(2) == 0:
		next = v1.BotInWaitingRoom
	case c.phase == v1.BotJoiningCall || c.phase == v1.BotInWaitingRoom:
		next = v1.BotInCall
	default:
		return // in the call: it ends with finish
	}
	w.sendStatus(c, botclient.StatusReport{Phase: string(next)})
}

// finish ends the meeting: Done, or Fatal with the bot's own reason.
func (w *world) finish(c *container) {
	rep := botclient.StatusReport{Phase: botclient.PhaseDone, RecordingLocation: "s3://recordings/" + c.bot}
	if w.rng.IntN(4) == 0 {
		rep = botclient.StatusReport{Phase: botclient.PhaseFatal, Reason: "Kicked", Message: "removed by the host"}
	}
	w.sendStatus(c, rep)
	c.exited = true
}

func (w *world) sendStatus(c *container, rep botclient.StatusReport) {
	w.counts["bot-api status "+rep.Phase]++
	code, body := w.call(http.MethodPost, "/v1/bots/"+c.bot+"/status", c.cred, rep)
	switch code {
	case http.StatusOK:
		var resp botclient.StatusResponse
		must(json.Unmarshal(body, &resp))
		c.phase = v1.BotPhase(resp.Phase)
		if c.phase.Terminal() {
			c.exited = true
		}
	case http.StatusForbidden:
		c.bot = ""
	case http.StatusGone, http.StatusUnauthorized:
		c.exited = true
	}
}

// containerAction lets one running container do what bots do.
func (w *world) containerAction() bool {
	var live []*container
	for _, c := range w.runningContainers() {
		if !c.exited {
			live = append(live, c)
		}
	}
	if len(live) == 0 {
		return false
	}
	c := live[w.rng.IntN(len(live))]
	w.detail = c.slot + " (" + c.bot + ")"
	switch r := w.rng.IntN(100); {
	case c.silent && r < 15:
		c.silent = false
		w.counts["container resumes"]++
	case c.silent:
		w.counts["container stays silent"]++
	case c.bot == "" || r < 5:
		w.fetchConfig(c)
	case r < 55:
		w.heartbeat(c)
	case r < 82:
		w.reportPhase(c)
	case r < 90:
		w.finish(c)
	default:
		c.silent = true
		w.counts["container goes silent"]++
	}
	return true
}

// beatAll is one heartbeat interval of every container that is not silent: the bots beat,
// those without a bot ask for their config.
func (w *world) beatAll() {
	for _, c := range w.runningContainers() {
		switch {
		case c.exited || c.silent:
		case c.bot == "":
			w.fetchConfig(c)
		default:
			w.heartbeat(c)
		}
	}
}

// progressAll moves every bot one phase further (used to drain a run): bots in the call
// finish, the others report their next phase.
func (w *world) progressAll() {
	for _, c := range w.runningContainers() {
		switch {
		case c.exited:
		case c.silent:
			c.silent = w.rng.IntN(3) != 0
		case c.bot == "":
			w.fetchConfig(c)
		case c.phase == v1.BotInCall && !c.leave:
			w.finish(c)
		default:
			w.heartbeat(c)
			if c.bot != "" && !c.exited {
				w.reportPhase(c)
			}
		}
	}
}

// createBot creates a Bot as a user would, with the defaults the API server fills in.
func (w *world) createBot() bool {
	active := 0
	for _, b := range w.liveBots() {
		if !b.Status.Phase.Terminal() {
			active++
		}
	}
	if active >= 24 {
		return false
	}
	w.bots++
	name := fmt.Sprintf("bot-%05d", w.bots)
	b := &v1.Bot{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	s := &b.Spec
	switch r := w.rng.IntN(100); {
	case r < 65:
		s.MeetingURL = "https://zoom.us/j/" + name
		if w.rng.IntN(2) == 0 {
			s.PoolRef = &v1.PoolReference{Name: []string{"alpha", "beta"}[w.rng.IntN(2)]}
		}
	case r < 97:
		s.MeetingURL = "https://meet.google.com/" + name
		if w.rng.IntN(2) == 0 {
			s.PoolRef = &v1.PoolReference{Name: "gamma"}
		}
	default:
		s.MeetingURL = "https://teams.microsoft.com/l/" + name // no pool serves Teams
	}
	s.Priority = []int32{-10, 0, 0, 0, 0, 5, 5, 100}[w.rng.IntN(8)]
	switch r := w.rng.IntN(10); {
	case r < 2:
		s.QueueTimeout = v1.Duration(fmt.Sprintf("%ds", 20+w.rng.IntN(160)))
	case r < 3:
		s.QueueTimeout = "10m"
	}
	switch r := w.rng.IntN(20); {
	case r < 2: // too close to its start for a reservation
		s.StartTime = &metav1.Time{Time: w.clk.Now().Add(time.Duration(w.rng.IntN(600)) * time.Second)}
	case r < 4: // reserved, on a quarter hour (several bots share a start) 10 to 40 minutes ahead
		at := w.clk.Now().Add(10*time.Minute + time.Duration(w.rng.IntN(30))*time.Minute).Truncate(15 * time.Minute)
		if at.Sub(w.clk.Now()) < 10*time.Minute {
			at = at.Add(15 * time.Minute)
		}
		s.StartTime = &metav1.Time{Time: at}
	}
	s.MaxDuration = "1h"
	if w.rng.IntN(3) == 0 {
		s.MaxDuration = v1.Duration(fmt.Sprintf("%dm", 2+w.rng.IntN(20)))
	}
	if w.rng.IntN(2) == 0 {
		s.TTLAfterFinished = v1.Duration(fmt.Sprintf("%dm", 1+w.rng.IntN(30)))
	}
	s.AutomaticLeave = v1.AutomaticLeave{WaitingRoomTimeout: "10m", NoOneJoinedTimeout: "10m",
		EveryoneLeftTimeout: "30s", InactivityTimeout: "30m"}
	if w.tenant.shared && strings.HasPrefix(s.MeetingURL, "https://zoom.us/") && w.tenant.rng.IntN(3) == 0 {
		w.tenantBot(b)
	}
	must(w.api.Create(w.ctx, b))
	w.detail = b.Name
	return true
}

// deleteBot deletes a random bot, as a user would (mostly running or waiting ones).
func (w *world) deleteBot() bool {
	var cands []v1.Bot
	for _, b := range w.liveBots() {
		if b.DeletionTimestamp.IsZero() {
			cands = append(cands, b)
		}
	}
	if len(cands) == 0 {
		return false
	}
	b := cands[w.rng.IntN(len(cands))]
	w.detail = b.Name
	must(w.api.Delete(w.ctx, &b))
	return true
}

// cleanup deletes the oldest finished bots beyond a dozen, as a user tidying up would (bots
// without ttlAfterFinished are kept forever otherwise).
func (w *world) cleanup() {
	var done []v1.Bot
	for _, b := range w.liveBots() {
		if b.Status.Phase.Terminal() && b.DeletionTimestamp.IsZero() {
			done = append(done, b)
		}
	}
	for i := 0; i < len(done)-12; i++ {
		must(w.api.Delete(w.ctx, &done[i]))
		w.counts["cleanup deletes a finished bot"]++
	}
}
