package coolify

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"
)

// SetDescription sets an application's description. Descriptions are informational
// housekeeping, so they never hold their caller (a reconcile on its way to a deploy, say)
// while the user's budget is short: when the request cannot go at once, it is queued and the
// client sends it when the budget has room, after the start path. (It waits in the limiter
// only while no start-path request does, and never for a pause.) A newer description for an
// application whose update is still queued replaces it, so a burst of phase changes costs
// one PATCH per application with the last text; the replaced call has already returned nil
// (counted in botpool_coolify_descriptions_superseded_total). A queued update that then fails
// is logged and dropped, as a failed description always was. Errors come back only from a
// request sent at once, a refusal by the server (a 429), or the local length check.
func (c *Client) SetDescription(ctx context.Context, uuid, description string) error {
	if utf8.RuneCountInString(description) > MaxDescriptionLength {
		return fmt.Errorf("coolify: description longer than %d characters: %w", MaxDescriptionLength, ErrValidation)
	}
	q := &c.limiter.descriptions
	key := c.base.String() + "\x00" + uuid
	switch q.offer(key, c, uuid, description) {
	case offerReplaced:
		c.metrics.superseded.Inc()
		return nil
	case offerQueued:
		return nil
	}
	err := c.sendDescription(WithPriority(ctx, Housekeeping), uuid, description, true)
	var we *WaitError
	if errors.As(err, &we) && (we.Reason == WaitLimiter || we.Reason == WaitBulkhead) {
		// Held back on our side (the budget is short): queued. What the server refused (a
		// 429, an open breaker) goes back to the caller as before.
		if q.requeue(key, description) {
			c.metrics.superseded.Inc()
		}
		return nil
	}
	q.done(key)
	return err
}

func (c *Client) sendDescription(ctx context.Context, uuid, description string, yield bool) error {
	return c.do(ctx, call{op: "update-application-by-uuid", method: http.MethodPatch,
		path: "/applications/" + esc(uuid), body: map[string]string{"description": description}, idempotent: true,
		yield: yield})
}

// descriptionQueue holds one user's description updates that wait for the budget, at most
// one per application (the latest), and sends them one at a time from a goroutine that
// lives while the queue is not empty. Lock order: Limiter.mu before descriptionQueue.mu.
type descriptionQueue struct {
	mu      sync.Mutex
	entries map[string]*descEntry // by base URL and application uuid
	order   []string              // keys of the queued entries, oldest first
	running bool                  // the sender goroutine is draining the queue
}

type descEntry struct {
	c    *Client
	uuid string
	text string
	// queued: text waits for the sender; sending: a request for this application is out
	// (both may hold: a newer text waits behind the one being sent).
	queued, sending bool
}

type offerResult int

const (
	offerSend     offerResult = iota // nothing pending for the application: the caller sends
	offerQueued                      // queued behind a request for the application in flight
	offerReplaced                    // replaced a queued update (which is superseded)
)

// offer registers an update of the application; see offerResult.
func (q *descriptionQueue) offer(key string, c *Client, uuid, text string) offerResult {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.entries == nil {
		q.entries = map[string]*descEntry{}
	}
	e := q.entries[key]
	switch {
	case e == nil:
		q.entries[key] = &descEntry{c: c, uuid: uuid, text: text, sending: true}
		return offerSend
	case e.queued:
		e.c, e.text = c, text
		return offerReplaced
	}
	e.c, e.text, e.queued = c, text, true
	q.enqueue(key)
	return offerQueued
}

// requeue hands an update the caller could not send at once to the sender. superseded says a
// newer one was queued meanwhile, and this one is dropped.
func (q *descriptionQueue) requeue(key, text string) (superseded bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.entries[key]
	e.sending = false
	if e.queued {
		return true
	}
	e.text, e.queued = text, true
	q.enqueue(key)
	return false
}

// done records that the request for key ended; a newer update queued meanwhile stays.
func (q *descriptionQueue) done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.entries[key]; e != nil {
		e.sending = false
		if !e.queued {
			delete(q.entries, key)
		}
	}
}

// enqueue appends key and starts the sender if it is not running. Callers hold q.mu.
func (q *descriptionQueue) enqueue(key string) {
	q.order = append(q.order, key)
	if !q.running {
		q.running = true
		go q.drain()
	}
}

func (q *descriptionQueue) empty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.entries) == 0
}

// Pending reports how many description updates wait for the budget (for tests).
func (l *Limiter) PendingDescriptions() int {
	l.descriptions.mu.Lock()
	defer l.descriptions.mu.Unlock()
	return len(l.descriptions.order)
}

// drain sends the queued updates, oldest first, each with the latest text at the moment it
// goes. A request the budget holds back is tried again first, after the wait it was given;
// the sender holds no caller meanwhile.
func (q *descriptionQueue) drain() {
	for {
		q.mu.Lock()
		if len(q.order) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		key := q.order[0]
		q.order = q.order[1:]
		e := q.entries[key]
		e.queued, e.sending = false, true
		c, uuid, text := e.c, e.uuid, e.text
		q.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), c.budget+c.timeout)
		err := c.sendDescription(WithPriority(ctx, Housekeeping), uuid, text, false)
		cancel()
		wait, throttled := RetryAfter(err)
		q.mu.Lock()
		e.sending = false
		switch {
		case throttled && !e.queued: // not sent: first again, after the wait
			e.text, e.queued = text, true
			q.order = append([]string{key}, q.order...)
		case throttled: // not sent, and a newer text was queued meanwhile: this one is superseded
			c.metrics.superseded.Inc()
		case err != nil && !throttled && !errors.Is(err, ErrNotFound):
			c.log.Error(err, "Setting an application's description failed", "appUUID", uuid)
		}
		if !e.queued {
			delete(q.entries, key)
		}
		q.mu.Unlock()
		if throttled {
			_ = sleepCtx(context.Background(), c.clock, max(wait, time.Second))
		}
	}
}
