// Package simbot is a simulated meeting bot: what a bot image does, through the bot API only.
// It runs in the containers of the Coolify simulator (start it from sim.Hooks.OnStart) for the
// controller tests, the soak test and the demo, so they exercise the same contract a real bot
// image follows (docs/botapi.md): wait for its config until a bot is bound (the client keeps the
// binding credential the config carries and sends it with the bot calls), report JoiningCall
// and InCall, beat during the meeting, obey the heartbeat's leave and exit, report CallEnded and
// Done.
package simbot

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"botpool.dev/botpool/botapi/botclient"
	"botpool.dev/botpool/coolify/sim"
)

// Behaviour is how a simulated bot behaves. Zero values take the defaults noted per field.
type Behaviour struct {
	// MeetingLength is how long the bot stays InCall before it reports CallEnded, unless a
	// heartbeat tells it to leave first. Zero ends the meeting after the first heartbeat.
	MeetingLength time.Duration
	// JoinDelay is the time between JoiningCall and InCall (finding the meeting, admission).
	JoinDelay time.Duration
	// HeartbeatEvery is the heartbeat period; zero uses the interval the config asks for.
	HeartbeatEvery time.Duration
	// PollEvery is the first back-off after a transient error of a report or heartbeat
	// (doubled per retry). Default 100ms.
	PollEvery time.Duration
	// Wait is how long one config request of a free slot's container waits for a binding
	// (botclient.WaitForBinding). Default 30s.
	Wait time.Duration
	// OnConfig, when set, is called the moment the container has its bot's configuration,
	// before it reports anything (a benchmark timestamps "the container knows its bot").
	OnConfig func(botclient.Config)
	// Retries bounds the attempts of one status report or heartbeat that meets transient
	// errors (5xx, 429, connection refused). Default 8.
	Retries int
	// HTTPClient talks to the bot API; nil uses botclient's default.
	HTTPClient *http.Client
}

// Outcome says how a run that did not fail ended.
type Outcome string

const (
	// Finished: the meeting ended on its own; the bot reported CallEnded and Done.
	Finished Outcome = "Finished"
	// Left: a heartbeat answered "leave"; the bot reported Leaving, CallEnded and Done.
	Left Outcome = "Left"
	// Exited: the operator said the bot is over (410 on any call, heartbeat "exit", or a
	// heartbeat refused with 401 once the binding ended); the container stopped without
	// reporting anything more.
	Exited Outcome = "Exited"
	// PrePulled: the container is a pool's image pre-pull (BOTPOOL_PREPULL=1): it exited at once,
	// without a call to the bot API, as a bot image should (docs/botapi.md).
	PrePulled Outcome = "PrePulled"
)

// IsPrePull reports whether the container is a pool's image pre-pull (its env has
// BOTPOOL_PREPULL=1) rather than a slot's: it serves no bot, and the operator stops it.
func IsPrePull(c sim.Container) bool { return c.Env[botclient.PrePullEnv] == "1" }

// Result is what a run did.
type Result struct {
	// Bot is the name of the bot the container served; empty when it never got one.
	Bot        string
	Outcome    Outcome
	Heartbeats int
}

// Run plays one container's life: it returns when the bot is Done, when the operator says to
// exit, or with ctx's error when ctx ends (the container was stopped); a pre-pull's container
// (IsPrePull) returns PrePulled at once. Any other error means the operator answered what a
// bot image could not make sense of.
func Run(ctx context.Context, c sim.Container, b Behaviour) (Result, error) {
	if IsPrePull(c) {
		return Result{Outcome: PrePulled}, nil
	}
	if b.PollEvery <= 0 {
		b.PollEvery = 100 * time.Millisecond
	}
	if b.Retries <= 0 {
		b.Retries = 8
	}
	if b.Wait <= 0 {
		b.Wait = botclient.DefaultWait
	}
	r := &run{b: b, cl: botclient.New(c.Env["BOTPOOL_API_URL"], c.Env["POOL_SLOT_UUID"], c.Env["BOTPOOL_SLOT_TOKEN"], b.HTTPClient)}
	err := r.play(ctx)
	if errors.Is(err, botclient.ErrGone) {
		// Whichever call it answered (the config, a heartbeat or report once the slot let go
		// of the ended bot): exit, without reporting anything more.
		r.res.Outcome = Exited
		return r.res, nil
	}
	return r.res, err
}

type run struct {
	b   Behaviour
	cl  *botclient.Client
	res Result
}

func (r *run) play(ctx context.Context) error {
	// A warm slot's container waits here, woken by its binding.
	cfg, err := r.cl.WaitForBinding(ctx, r.b.Wait)
	if err != nil { // ErrGone (exit) is Run's
		return fmt.Errorf("config: %w", err)
	}
	if r.b.OnConfig != nil {
		r.b.OnConfig(cfg)
	}
	r.res.Bot = cfg.Bot
	if err := r.report(ctx, botclient.PhaseJoiningCall); err != nil {
		return err
	}
	if err := sleep(ctx, r.b.JoinDelay); err != nil {
		return err
	}
	if err := r.report(ctx, botclient.PhaseInCall); err != nil {
		return err
	}
	every := r.b.HeartbeatEvery
	if every <= 0 {
		every = time.Duration(cfg.HeartbeatInterval)
	}
	if every <= 0 {
		every = 10 * time.Second
	}
	action, err := r.meet(ctx, every)
	if err != nil {
		return err
	}
	phases := []string{botclient.PhaseCallEnded, botclient.PhaseDone}
	r.res.Outcome = Finished
	switch action {
	case botclient.ActionExit:
		r.res.Outcome = Exited
		return nil
	case botclient.ActionLeave:
		r.res.Outcome = Left
		phases = append([]string{botclient.PhaseLeaving}, phases...)
	}
	for _, phase := range phases {
		if err := r.report(ctx, phase); err != nil {
			return err
		}
	}
	return nil
}

// meet beats at once and then every period until the meeting is over or the operator answers
// something other than continue, which it returns.
func (r *run) meet(ctx context.Context, every time.Duration) (botclient.Action, error) {
	end := time.Now().Add(r.b.MeetingLength)
	for {
		var hb botclient.HeartbeatResponse
		err := r.retry(ctx, func() (err error) {
			hb, err = r.cl.Heartbeat(ctx, r.res.Bot)
			return err
		})
		if errors.Is(err, botclient.ErrUnauthorized) {
			// The binding ended (the slot no longer serves this bot): the credential is
			// refused from then on, and the container stops, as a heartbeat's exit says.
			return botclient.ActionExit, nil
		}
		if err != nil {
			return "", fmt.Errorf("heartbeat: %w", err)
		}
		r.res.Heartbeats++
		if hb.Action != botclient.ActionContinue {
			return hb.Action, nil
		}
		left := time.Until(end)
		if left <= 0 {
			return botclient.ActionContinue, nil
		}
		if err := sleep(ctx, min(every, left)); err != nil {
			return "", err
		}
		if time.Until(end) <= 0 {
			return botclient.ActionContinue, nil
		}
	}
}

func (r *run) report(ctx context.Context, phase string) error {
	err := r.retry(ctx, func() error {
		_, err := r.cl.ReportStatus(ctx, r.res.Bot, botclient.StatusReport{Phase: phase})
		return err
	})
	if err != nil {
		return fmt.Errorf("reporting %s: %w", phase, err)
	}
	return nil
}

// retry tries call up to Retries times, PollEvery to 5 s apart, while it fails transiently.
func (r *run) retry(ctx context.Context, call func() error) error {
	return botclient.Retry(ctx, r.b.Retries, r.b.PollEvery, 5*time.Second, call)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
