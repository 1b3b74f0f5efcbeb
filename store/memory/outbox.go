package memory

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"botpool.dev/botpool/store"
)

// Outbox is the in-memory store.Outbox. It keeps the semantics of the Postgres outbox (order
// per bot, leases, idempotent adds) but nothing survives a restart of the manager: messages
// pending then are never sent. Delivered and failed messages are forgotten after the history
// limit of finished messages, oldest first.
type Outbox struct {
	limit int

	mu       sync.Mutex
	messages map[string]*outboxEntry
	finished []string // ids of delivered or failed messages, oldest first
}

type outboxEntry struct {
	m            store.OutboxMessage
	claimedUntil time.Time
}

// NewOutbox returns an empty outbox keeping up to historyLimit finished messages.
func NewOutbox(historyLimit int) *Outbox {
	return &Outbox{limit: max(historyLimit, 1), messages: map[string]*outboxEntry{}}
}

var _ store.Outbox = (*Outbox)(nil)

// AddMessage implements store.Outbox.
func (o *Outbox) AddMessage(_ context.Context, m store.OutboxMessage) error {
	if m.ID == "" || m.BotUID == "" || m.URL == "" {
		return errors.New("outbox message needs an id, a bot uid and a url")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.messages[m.ID]; ok {
		return nil
	}
	m.State, m.Attempts, m.LastError = store.OutboxPending, 0, ""
	m.NextAttemptAt = m.CreatedAt
	m.Payload = slices.Clone(m.Payload)
	o.messages[m.ID] = &outboxEntry{m: m}
	return nil
}

// ClaimMessages implements store.Outbox.
func (o *Outbox) ClaimMessages(_ context.Context, now time.Time, lease time.Duration, limit int) ([]store.OutboxMessage, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	// The head of each bot's pending messages: later ones wait for it.
	heads := map[types.UID]*outboxEntry{}
	for _, e := range o.messages {
		if e.m.State != store.OutboxPending {
			continue
		}
		if h, ok := heads[e.m.BotUID]; !ok || e.m.Seq < h.m.Seq {
			heads[e.m.BotUID] = e
		}
	}
	var due []*outboxEntry
	for _, e := range heads {
		if !e.m.NextAttemptAt.After(now) && !e.claimedUntil.After(now) {
			due = append(due, e)
		}
	}
	slices.SortFunc(due, func(a, b *outboxEntry) int {
		return cmp.Or(a.m.NextAttemptAt.Compare(b.m.NextAttemptAt), strings.Compare(a.m.ID, b.m.ID))
	})
	var out []store.OutboxMessage
	for _, e := range due[:min(len(due), max(limit, 0))] {
		e.m.Attempts++
		e.claimedUntil = now.Add(lease)
		m := e.m
		m.Payload = slices.Clone(m.Payload)
		out = append(out, m)
	}
	return out, nil
}

// FinishAttempt implements store.Outbox.
func (o *Outbox) FinishAttempt(_ context.Context, id string, out store.OutboxOutcome) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.messages[id]
	if !ok || e.m.State != store.OutboxPending {
		return nil // forgotten or already finished: a late outcome of an expired lease
	}
	e.claimedUntil = time.Time{}
	if out.Error != "" {
		e.m.LastError = out.Error
	}
	switch out.State {
	case store.OutboxDelivered, store.OutboxFailed:
		e.m.State = out.State
		o.finished = append(o.finished, id)
		for len(o.finished) > o.limit {
			delete(o.messages, o.finished[0])
			o.finished = o.finished[1:]
		}
	default:
		e.m.NextAttemptAt = out.NextAttemptAt
	}
	return nil
}

// OutboxSummary implements store.Outbox.
func (o *Outbox) OutboxSummary(_ context.Context, bot types.UID) (store.OutboxSummary, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var s store.OutboxSummary
	var deliveredSeq int64 = -1
	var lastErrAt time.Time
	for _, e := range o.messages {
		if e.m.BotUID != bot {
			continue
		}
		switch e.m.State {
		case store.OutboxPending:
			s.Pending++
		case store.OutboxDelivered:
			s.Delivered++
			if e.m.Seq > deliveredSeq {
				deliveredSeq, s.DeliveredPhase = e.m.Seq, e.m.Phase
			}
		case store.OutboxFailed:
			s.Failed++
		}
		if e.m.LastError != "" && e.m.State != store.OutboxDelivered && !e.m.NextAttemptAt.Before(lastErrAt) {
			lastErrAt, s.LastError = e.m.NextAttemptAt, e.m.LastError
		}
	}
	return s, nil
}

// OutboxStats implements store.Outbox.
func (o *Outbox) OutboxStats(_ context.Context, now time.Time) (store.OutboxStats, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var st store.OutboxStats
	for _, e := range o.messages {
		if e.m.State != store.OutboxPending {
			continue
		}
		st.Pending++
		if !e.m.NextAttemptAt.After(now) && (st.OldestDue.IsZero() || e.m.NextAttemptAt.Before(st.OldestDue)) {
			st.OldestDue = e.m.NextAttemptAt
		}
	}
	return st, nil
}
