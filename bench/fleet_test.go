package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"botpool.dev/botpool/botapi/botclient"
	"botpool.dev/botpool/coolify/sim"
)

// fleet runs a simulated bot in every container the simulator starts. Each one does what a
// bot image does, through the bot API only: it reads its config, reports JoiningCall and
// InCall, beats once, stays in the meeting, and reports CallEnded and Done — which releases
// its slot. Meetings can be held open until release, so a benchmark decides when slots turn
// free.
type fleet struct {
	meeting time.Duration // how long (±50%) a bot stays InCall once meetings may end
	gate    chan struct{} // closed by release: meetings may end
	once    sync.Once

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	done     map[string]time.Time // bot → when its Done report was answered
	firstErr error
}

// newFleet returns bots that stay meeting long in their call; held bots wait for release
// first.
func newFleet(meeting time.Duration, held bool) *fleet {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fleet{meeting: meeting, gate: make(chan struct{}), ctx: ctx, cancel: cancel, done: map[string]time.Time{}}
	if !held {
		f.release()
	}
	return f
}

// release lets every meeting end (after its meeting time).
func (f *fleet) release() { f.once.Do(func() { close(f.gate) }) }

// stop ends every bot still running, as containers stopped with the benchmark.
func (f *fleet) stop() {
	f.cancel()
	f.wg.Wait()
}

func (f *fleet) onStart(c sim.Container) {
	f.wg.Go(func() {
		if err := f.run(c); err != nil && f.ctx.Err() == nil {
			f.mu.Lock()
			if f.firstErr == nil {
				f.firstErr = fmt.Errorf("container of slot %s: %w", c.AppName, err)
			}
			f.mu.Unlock()
		}
	})
}

// err is the first error a bot met, if any.
func (f *fleet) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.firstErr
}

// doneAt returns when bot's Done report was answered.
func (f *fleet) doneAt(bot string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.done[bot]
	return t, ok
}

func (f *fleet) run(c sim.Container) error {
	if c.Env[botclient.PrePullEnv] == "1" {
		return nil // a pool's image pre-pull exits at once, as a bot image should
	}
	cl := botclient.New(c.Env["BOTPOOL_API_URL"], c.Env["POOL_SLOT_UUID"], c.Env["BOTPOOL_SLOT_TOKEN"], nil)
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Minute)
	defer cancel()
	var cfg botclient.Config
	for {
		var err error
		cfg, err = cl.Config(ctx)
		if err == nil {
			break
		}
		// Free (the manager's cache has not seen the binding yet), or transient: ask again,
		// within the slot's limit of 20 requests a second.
		if !errors.Is(err, botclient.ErrSlotFree) && !botclient.Retryable(err) {
			return fmt.Errorf("config: %w", err)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	report := func(phase string) error {
		return retry(ctx, func() error {
			_, err := cl.ReportStatus(ctx, cfg.Bot, botclient.StatusReport{Phase: phase})
			return err
		}, "bot %s reporting %s", cfg.Bot, phase)
	}
	if err := report(botclient.PhaseJoiningCall); err != nil {
		return err
	}
	if err := report(botclient.PhaseInCall); err != nil {
		return err
	}
	if err := retry(ctx, func() error {
		hb, err := cl.Heartbeat(ctx, cfg.Bot)
		if err == nil && hb.Action != botclient.ActionContinue {
			err = fmt.Errorf("told to %q in the middle of its meeting", hb.Action)
		}
		return err
	}, "bot %s heartbeat", cfg.Bot); err != nil {
		return err
	}
	select {
	case <-f.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	// ±50%: bots that started together do not all finish in the same instant.
	if err := sleep(ctx, time.Duration(float64(f.meeting)*(0.5+rand.Float64()))); err != nil {
		return err
	}
	if err := report(botclient.PhaseCallEnded); err != nil {
		return err
	}
	if err := report(botclient.PhaseDone); err != nil {
		return err
	}
	f.mu.Lock()
	f.done[cfg.Bot] = time.Now()
	f.mu.Unlock()
	return nil
}

// retry is what a bot image does (docs/botapi.md): up to 8 tries, 50 ms to 2 s apart.
func retry(ctx context.Context, call func() error, format string, args ...any) error {
	if err := botclient.Retry(ctx, 8, 50*time.Millisecond, 2*time.Second, call); err != nil {
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)
	}
	return nil
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
