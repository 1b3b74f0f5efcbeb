package botapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/botapi/botclient"
	"botpool.dev/botpool/internal/botfailures"
	"botpool.dev/botpool/store"
)

var logLevels = map[string]bool{"debug": true, "info": true, "warn": true, "error": true}

// handleConfig answers GET /v1/slots/{appUUID}/config with the bound bot's configuration;
// with ?wait=<duration> a free slot's request waits for the binding (see awaitBinding).
func (s *Server) handleConfig(_ http.ResponseWriter, r *http.Request) (int, any, error) {
	slot, err := s.authenticate(r)
	if err != nil {
		return 0, nil, err
	}
	if app := r.PathValue("appUUID"); slot.Status.ApplicationUUID != app {
		return 0, nil, errorf(http.StatusForbidden, "this slot's token does not belong to application "+app)
	}
	wait, err := parseWait(r.URL.Query())
	if err != nil {
		return 0, nil, err
	}
	s.recordAsk(r.Context(), slot)
	if err := leavingSlot(slot); err != nil {
		return 0, nil, err
	}
	if slot.Spec.BotRef == nil && wait > 0 {
		if slot, err = s.awaitBinding(r, slot, wait); err != nil {
			return 0, nil, err
		}
	}
	ref := slot.Spec.BotRef
	if ref == nil {
		return 0, nil, errorf(http.StatusNotFound, "no bot is bound to this slot yet")
	}
	bot, err := s.boundBotOf(r.Context(), slot)
	if err != nil {
		return 0, nil, err
	}
	if bot.Status.Phase.Terminal() {
		return 0, nil, errorf(http.StatusGone, fmt.Sprintf("bot %s is %s: exit", bot.Name, bot.Status.Phase))
	}
	// The first answer for the binding claims it and carries the bot's credential; any later
	// one is refused. A caller that left already would burn the binding: none is claimed.
	if err := r.Context().Err(); err != nil {
		return 0, nil, &apiError{code: http.StatusServiceUnavailable, msg: "the request ended before the answer"}
	}
	// A binding this slot's container was handed already is refused below (409) without its
	// parameters read: a container asking in a loop costs no Secret reads.
	var params json.RawMessage
	var secrets map[string]string
	if c := bot.Status.Binding; c == nil || c.SlotUID != slot.UID {
		if params, secrets, err = s.parametersOf(r.Context(), slot, bot); err != nil {
			return 0, nil, err
		}
	}
	cred, err := s.claim(r.Context(), slot, bot)
	if err != nil {
		return 0, nil, err
	}
	cfg := s.configOf(bot)
	cfg.Credential, cfg.Parameters, cfg.SecretParameters = cred, params, secrets
	return http.StatusOK, cfg, nil
}

// askEvery is how often one replica records the asks of one slot's container that carry the
// same token: a container calling in a loop costs the store no more than that.
const askEvery = time.Second

// askMark is the last ask recorded for a slot.
type askMark struct {
	hash string
	at   time.Time
}

// recordAsk records that the slot's container asked for work now, with the hash of the token
// it used, so the slot controller can tell a container that waits for a bot (and the current
// container from an older one) from one that stopped asking. A store outage never fails the
// call: the ask is buffered, or logged and lost (the container asks again).
func (s *Server) recordAsk(ctx context.Context, slot *v1.BotPoolSlot) {
	now := s.cfg.Clock.Now()
	hash := slot.Status.TokenSHA256
	s.mu.Lock()
	last, ok := s.asked[slot.UID]
	due := !ok || last.hash != hash || now.Sub(last.at) >= askEvery
	if due {
		if len(s.asked) >= pruneAbove {
			for uid, m := range s.asked {
				if now.Sub(m.at) >= askEvery {
					delete(s.asked, uid)
				}
			}
		}
		s.asked[slot.UID] = askMark{hash: hash, at: now}
	}
	s.mu.Unlock()
	if !due {
		return
	}
	err := s.cfg.Liveness.RecordSlotAsk(ctx, store.SlotAsk{
		SlotUID: slot.UID, Namespace: slot.Namespace, Name: slot.Name, TokenSHA256: hash, At: now,
	})
	if !store.Accepted(err) {
		s.cfg.Log.Error(err, "Recording a slot's ask failed", "slot", slot.Name, "namespace", slot.Namespace)
	}
}

// hangUpEvery is how often one replica records the hang-ups of one slot's container that
// carry the same token. A container that loops "wait, hang up" would otherwise cost two rows a
// request (the hang-up, and the ask that clears it); with it, one hang-up and one ask more per
// interval than the asks' own bound. The interval is the slot controller's rejoin grace: a
// container that hangs up again within it has just shown it is alive. One that dies then is
// found by the ask window instead (75 s rather than 10 s).
const hangUpEvery = 10 * time.Second

// recordLeft records that the slot's container hung up the wait it began at since: a
// container that dies closes its connection (a proxy in between closes its own), so the slot
// controller need not wait for the ask window to stop offering the slot. The container's last
// ask mark on this replica goes, so that its next ask, however soon, is recorded and clears
// the hang-up: one whose client merely timed out asks again at once. At most one hang-up per
// hangUpEvery is recorded (a skipped one leaves the ask mark, so the ask after it is not
// recorded early either). A store that fails is logged; the client is gone, and the ask window
// still catches a dead container.
func (s *Server) recordLeft(ctx context.Context, slot *v1.BotPoolSlot, since time.Time) {
	now := s.cfg.Clock.Now()
	hash := slot.Status.TokenSHA256
	s.mu.Lock()
	if m, ok := s.left[slot.UID]; ok && m.hash == hash && now.Sub(m.at) < hangUpEvery {
		s.mu.Unlock()
		return
	}
	if len(s.left) >= pruneAbove {
		for uid, m := range s.left {
			if now.Sub(m.at) >= hangUpEvery {
				delete(s.left, uid)
			}
		}
	}
	s.left[slot.UID] = askMark{hash: hash, at: now}
	if m, ok := s.asked[slot.UID]; ok && m.hash == hash {
		delete(s.asked, slot.UID)
	}
	s.mu.Unlock()
	err := s.cfg.Liveness.RecordSlotLeft(ctx, store.SlotLeft{
		SlotUID: slot.UID, TokenSHA256: hash, Since: since, At: now,
	})
	if !store.Accepted(err) {
		s.cfg.Log.Error(err, "Recording that a slot's container hung up its wait failed", "slot", slot.Name, "namespace", slot.Namespace)
	}
}

// boundBotOf returns the bot a slot's botRef names. This replica's cache may have seen the
// binding before the Bot (two informers; a waiting request is woken by the slot's): a bot the
// cache lacks, or holds under another uid, is read from the API server before the container is
// told that its bot is gone.
func (s *Server) boundBotOf(ctx context.Context, slot *v1.BotPoolSlot) (*v1.Bot, error) {
	ref := slot.Spec.BotRef
	gone := errorf(http.StatusGone, "bot "+ref.Name+" no longer exists: exit")
	key := slot.BotKey() // a bot of another namespace when the pool is shared
	bot := &v1.Bot{}
	err := s.cfg.Cache.Get(ctx, key, bot)
	if err == nil && bot.UID == ref.UID {
		return bot, nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	if err := s.cfg.APIReader.Get(ctx, key, bot); apierrors.IsNotFound(err) {
		return nil, gone
	} else if err != nil {
		return nil, err
	}
	if bot.UID != ref.UID {
		return nil, gone
	}
	return bot, nil
}

func (s *Server) configOf(bot *v1.Bot) botclient.Config {
	platform := bot.Status.Platform
	if platform == "" {
		platform = bot.Spec.Platform
	}
	if platform == "" {
		platform, _ = v1.PlatformForURL(bot.Spec.MeetingURL)
	}
	al := bot.Spec.AutomaticLeave
	return botclient.Config{
		Bot:         bot.Name,
		Namespace:   bot.Namespace,
		MeetingURL:  bot.Spec.MeetingURL,
		Platform:    string(platform),
		DisplayName: bot.Spec.DisplayName,
		Recording:   bot.Spec.Recording.Enabled,
		MaxDuration: botclient.Duration(bot.Spec.MaxDuration.OrDefault(v1.DefaultMaxDuration)),
		Leave: botclient.AutomaticLeave{
			WaitingRoomTimeout:  botclient.Duration(al.WaitingRoomTimeout.Duration()),
			NoOneJoinedTimeout:  botclient.Duration(al.NoOneJoinedTimeout.Duration()),
			EveryoneLeftTimeout: botclient.Duration(al.EveryoneLeftTimeout.Duration()),
			InactivityTimeout:   botclient.Duration(al.InactivityTimeout.Duration()),
		},
		HeartbeatInterval: botclient.Duration(s.cfg.HeartbeatInterval),
	}
}

// handleHeartbeat records liveness and tells the bot what to do next.
func (s *Server) handleHeartbeat(_ http.ResponseWriter, r *http.Request) (int, any, error) {
	bot, slot, err := s.authenticateBinding(r)
	if err != nil {
		return 0, nil, err
	}
	if err := readBody(r, maxHeartbeatBody, &struct{}{}, true); err != nil {
		return 0, nil, err
	}
	resp := botclient.HeartbeatResponse{LogLevel: "info"}
	// Liveness is upserted on every authorized beat, so a record lost in an outage is whole
	// again on the next one. A store outage never fails the bot: the beat is buffered, the
	// answer says so, and liveness reads "unknown", never "dead", until it is written. A beat
	// the store did not take at all is a 503: the bot beats again.
	switch err := s.recordBeat(r.Context(), bot); {
	case errors.Is(err, store.ErrBuffered):
		resp.Buffered = true
	case err != nil:
		return 0, nil, &apiError{code: http.StatusServiceUnavailable,
			msg: "the operator could not record this heartbeat; send it again", retryAfter: time.Second}
	}
	if lvl := bot.Annotations[v1.AnnotationLogLevel]; logLevels[lvl] {
		resp.LogLevel = lvl
	}
	resp.Action = s.actionFor(bot)
	if resp.Action == botclient.ActionContinue && !slot.DeletionTimestamp.IsZero() {
		// The slot is being deleted (its pool deleted or pruned, its namespace going): the
		// bot leaves gracefully before the slot controller deletes its application.
		resp.Action = botclient.ActionLeave
	}
	return http.StatusOK, resp, nil
}

// recordBeat records that the bot is alive now: nil once stored, store.ErrBuffered when it
// waits for the database, another error (logged) when the store did not take it.
func (s *Server) recordBeat(ctx context.Context, bot *v1.Bot) error {
	err := s.cfg.Liveness.RecordHeartbeat(ctx, store.Heartbeat{
		BotUID: bot.UID, Namespace: bot.Namespace, Name: bot.Name, At: s.cfg.Clock.Now(),
	})
	if !store.Accepted(err) {
		s.cfg.Log.Error(err, "Recording a heartbeat failed", "bot", bot.Name, "namespace", bot.Namespace)
	}
	return err
}

// actionFor decides the answer to a heartbeat of a bound bot.
func (s *Server) actionFor(bot *v1.Bot) botclient.Action {
	switch {
	case bot.Status.Phase.Terminal():
		return botclient.ActionExit
	case bot.DeletionTimestamp != nil:
		return botclient.ActionLeave
	case bot.Status.StartedAt != nil &&
		s.cfg.Clock.Since(bot.Status.StartedAt.Time) > bot.Spec.MaxDuration.OrDefault(v1.DefaultMaxDuration):
		return botclient.ActionLeave
	}
	return botclient.ActionContinue
}

// boundBot authenticates the bot by its binding credential, decodes the body into v (at most
// limit bytes) and returns the bot, which must be the one named in the path and still bound:
// a copy of its own, which the caller may change (a status patch does).
func (s *Server) boundBot(r *http.Request, limit int64, v any) (*v1.Bot, *v1.BotPoolSlot, error) {
	bot, slot, err := s.authenticateBinding(r)
	if err != nil {
		return nil, nil, err
	}
	if err := readBody(r, limit, v, false); err != nil {
		return nil, nil, err
	}
	return bot.DeepCopy(), slot, nil
}

// handleStatus validates a reported phase against the Bot's and patches it into its status.
func (s *Server) handleStatus(_ http.ResponseWriter, r *http.Request) (int, any, error) {
	var rep botclient.StatusReport
	bot, slot, err := s.boundBot(r, maxStatusBody, &rep)
	if err != nil {
		return 0, nil, err
	}
	if len(rep.SpeakerTimeframes) > 0 {
		data, err := json.Marshal(rep.SpeakerTimeframes)
		if err != nil {
			return 0, nil, err
		}
		if err := s.appendEvents(r.Context(), bot, []botclient.Event{{Type: "speakerTimeframes", Data: data}}); err != nil {
			return 0, nil, err
		}
	}
	if !v1.BotPhase(rep.Phase).Terminal() {
		// Alive, which the report sets, must agree with the store; a beat the store did not
		// take is logged, and the report still counts (the next heartbeat is what matters).
		_ = s.recordBeat(r.Context(), bot)
	}
	phase, err := s.applyStatus(r.Context(), bot, slot, rep)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, botclient.StatusResponse{Phase: string(phase)}, nil
}

// applyStatus patches the reported phase into the Bot with an optimistic lock: a concurrent
// change by the controller (say, Fatal after a heartbeat timeout) is never overwritten; the
// report is validated again against the fresh object instead.
func (s *Server) applyStatus(ctx context.Context, bot *v1.Bot, slot *v1.BotPoolSlot, rep botclient.StatusReport) (v1.BotPhase, error) {
	reported := v1.BotPhase(rep.Phase)
	uid := bot.UID
	// The cache may still hold a version a write of ours replaced: a patch built on it would
	// be refused, so read the current one first.
	first := !s.cfg.Writes.Stale(uid, bot.ResourceVersion)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			if err := s.cfg.APIReader.Get(ctx, client.ObjectKeyFromObject(bot), bot); err != nil {
				return err
			}
			if bot.UID != uid { // deleted and created again under the name: not the caller's bot
				return apierrors.NewNotFound(v1.GroupVersion.WithResource("bots").GroupResource(), bot.Name)
			}
		}
		first = false
		changed, err := nextPhase(bot.Status.Phase, reported)
		if err != nil {
			return errorf(http.StatusConflict, err.Error())
		}
		if !changed {
			return nil
		}
		patch := client.MergeFromWithOptions(bot.DeepCopy(), client.MergeFromWithOptimisticLock{})
		bot.Status.Phase = reported
		if rep.Message != "" {
			bot.Status.Message = rep.Message
		}
		if rep.RecordingLocation != "" {
			bot.Status.RecordingLocation = rep.RecordingLocation
		}
		now := s.cfg.Clock.Now()
		if slot != nil && bot.Status.SlotName == "" {
			// A short run can end before the controller mirrored its binding: the bot's
			// record of where it ran must not depend on that.
			bot.Status.SlotName = slot.Name
			if !bot.ForeignTo(slot.Namespace) { // a shared pool's Coolify is not the tenant's to know
				bot.Status.ApplicationUUID = slot.Status.ApplicationUUID
			}
		}
		if reported.Terminal() {
			bot.Status.FinishedAt = &metav1.Time{Time: now}
			if reported == v1.BotFatal {
				bot.Status.Reason = v1.ReasonBotReported
				if rep.Reason != "" {
					bot.Status.Reason = v1.BotReason(rep.Reason)
				}
			}
			bot.SetFinishedConditions()
		} else {
			// A report is a sign of life from a running container: the same write says so,
			// instead of the controller writing Alive (and startedAt) after it.
			if bot.Status.StartedAt == nil {
				bot.Status.StartedAt = &metav1.Time{Time: now}
			}
			bot.MarkAlive(now)
		}
		bot.Status.TruncateTexts()
		if err := s.cfg.Client.Status().Patch(ctx, bot, patch); err != nil {
			return err
		}
		if reported == v1.BotFatal {
			s.metrics.failed.WithLabelValues(botfailures.Reported).Inc() // once: the write that made it Fatal
		}
		return nil
	})
	if apierrors.IsNotFound(err) {
		return "", errorf(http.StatusGone, "bot "+bot.Name+" no longer exists: exit")
	}
	return bot.Status.Phase, err
}

// handleEvents appends the bot's events to the store.
func (s *Server) handleEvents(_ http.ResponseWriter, r *http.Request) (int, any, error) {
	var req botclient.EventsRequest
	bot, _, err := s.boundBot(r, maxEventsBody, &req)
	if err != nil {
		return 0, nil, err
	}
	if err := s.appendEvents(r.Context(), bot, req.Events); err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, botclient.EventsResponse{Accepted: len(req.Events)}, nil
}

// maxEventSkew is how far a bot's clock may disagree with the operator's in an event's time.
const maxEventSkew = time.Minute

func (s *Server) appendEvents(ctx context.Context, bot *v1.Bot, events []botclient.Event) error {
	now := s.cfg.Clock.Now()
	// An event cannot predate its Bot: a time before it, beyond the skew, would backdate the
	// audit log (and dodge the retention of recent rows) without limit.
	earliest := bot.CreationTimestamp.Add(-maxEventSkew)
	rows := make([]store.BotEvent, len(events))
	for i, e := range events {
		at := e.At
		if at.IsZero() || at.After(now.Add(maxEventSkew)) || at.Before(earliest) {
			at = now // a container's clock is not trusted beyond small skew
		}
		rows[i] = store.BotEvent{BotUID: bot.UID, Namespace: bot.Namespace, Name: bot.Name, Type: e.Type, Data: e.Data, At: at}
	}
	err := s.cfg.Liveness.AppendBotEvents(ctx, rows)
	var quota *QuotaError
	switch {
	case store.Accepted(err):
		return nil
	case errors.As(err, &quota):
		// Whole seconds, rounded up: a Retry-After of 0 would invite the bot straight back.
		wait := max(time.Second, (quota.RetryAfter+time.Second-1)/time.Second*time.Second)
		return &apiError{code: http.StatusTooManyRequests, msg: quota.Error(), retryAfter: wait}
	case errors.Is(err, store.ErrInvalid):
		// The store refused the data itself: sending it again would not help.
		return errorf(http.StatusBadRequest, "the store refused these events: "+err.Error())
	}
	return err
}

// readBody enforces the content type and size cap, then decodes strictly (and validates, for
// the bodies that have validation).
func readBody(r *http.Request, limit int64, v any, allowEmpty bool) error {
	if r.ContentLength != 0 {
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			return errorf(http.StatusUnsupportedMediaType, "Content-Type must be application/json")
		}
	}
	body := http.MaxBytesReader(nil, r.Body, limit)
	var err error
	switch v := v.(type) {
	case *botclient.StatusReport:
		*v, err = decodeStatusReport(body)
	case *botclient.EventsRequest:
		v.Events, err = decodeEvents(body)
	default:
		err = decodeStrict(body, v, allowEmpty)
	}
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return errorf(http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", limit))
		}
		return errorf(http.StatusBadRequest, err.Error())
	}
	return nil
}
