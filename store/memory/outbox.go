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
// per bot, leases, fenced outcomes, idempotent adds, namespaces taking turns) but nothing
// survives a restart of the manager: messages pending then are never sent. Delivered and
// failed messages are forgotten beyond the history limit of finished messages, oldest first.
type Outbox struct {
	limit int

	mu       sync.Mutex
	messages map[string]*outboxEntry
	bots     map[types.UID][]*outboxEntry // each bot's messages by seq
	finished []string                     // ids of delivered or failed messages, oldest first
}

type outboxEntry struct {
	m            store.OutboxMessage
	claimedUntil time.Time
}

// NewOutbox returns an empty outbox keeping up to historyLimit finished messages.
func NewOutbox(historyLimit int) *Outbox {
	return &Outbox{limit: max(historyLimit, 1), messages: map[string]*outboxEntry{}, bots: map[types.UID][]*outboxEntry{}}
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
	list := o.bots[m.BotUID]
	i, taken := slices.BinarySearchFunc(list, m.Seq, func(e *outboxEntry, seq int64) int { return cmp.Compare(e.m.Seq, seq) })
	if taken {
		return store.ErrSeqTaken
	}
	m.State, m.Attempts, m.LastError = store.OutboxPending, 0, ""
	m.NextAttemptAt = m.CreatedAt
	m.Payload = slices.Clone(m.Payload)
	e := &outboxEntry{m: m}
	o.messages[m.ID] = e
	o.bots[m.BotUID] = slices.Insert(list, i, e)
	return nil
}

// head is the bot's first pending message, nil when none is pending.
func head(list []*outboxEntry) *outboxEntry {
	for _, e := range list {
		if e.m.State == store.OutboxPending {
			return e
		}
	}
	return nil
}

// claimable: due and not under a live lease.
func (e *outboxEntry) claimable(now time.Time) bool {
	return !e.m.NextAttemptAt.After(now) && !e.claimedUntil.After(now)
}

// ClaimMessages implements store.Outbox.
func (o *Outbox) ClaimMessages(_ context.Context, now time.Time, lease time.Duration, limit int) ([]store.OutboxMessage, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	byNamespace := map[string][]*outboxEntry{}
	for _, list := range o.bots {
		if h := head(list); h != nil && h.claimable(now) {
			byNamespace[h.m.Namespace] = append(byNamespace[h.m.Namespace], h)
		}
	}
	// Each namespace's due heads, oldest first, ranked; then rank by rank across namespaces.
	type ranked struct {
		e    *outboxEntry
		rank int
	}
	var due []ranked
	for _, heads := range byNamespace {
		slices.SortFunc(heads, compareDue)
		for i, e := range heads {
			due = append(due, ranked{e, i})
		}
	}
	slices.SortFunc(due, func(a, b ranked) int { return cmp.Or(cmp.Compare(a.rank, b.rank), compareDue(a.e, b.e)) })
	due = due[:min(len(due), max(limit, 0))]
	out := make([]store.OutboxMessage, 0, len(due))
	for _, r := range due {
		r.e.m.Attempts++
		r.e.claimedUntil = now.Add(lease)
		m := r.e.m
		m.Payload = slices.Clone(m.Payload)
		out = append(out, m)
	}
	return out, nil
}

func compareDue(a, b *outboxEntry) int {
	return cmp.Or(a.m.NextAttemptAt.Compare(b.m.NextAttemptAt), strings.Compare(a.m.ID, b.m.ID))
}

// FinishAttempt implements store.Outbox.
func (o *Outbox) FinishAttempt(_ context.Context, id string, out store.OutboxOutcome) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.messages[id]
	if !ok || e.m.State != store.OutboxPending || e.m.Attempts != out.Attempt {
		return nil // forgotten, finished, or the outcome of an older claim
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
			o.forget(o.finished[0])
			o.finished = o.finished[1:]
		}
	default:
		e.m.NextAttemptAt = out.NextAttemptAt
	}
	return nil
}

func (o *Outbox) forget(id string) {
	e, ok := o.messages[id]
	if !ok {
		return
	}
	delete(o.messages, id)
	list := slices.DeleteFunc(o.bots[e.m.BotUID], func(x *outboxEntry) bool { return x == e })
	if len(list) == 0 {
		delete(o.bots, e.m.BotUID)
	} else {
		o.bots[e.m.BotUID] = list
	}
}

// OutboxSummary implements store.Outbox.
func (o *Outbox) OutboxSummary(_ context.Context, bot types.UID, after int64) (store.OutboxSummary, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var s store.OutboxSummary
	var lastErrAt time.Time
	for _, e := range o.bots[bot] { // by seq: the last delivered and the last one win
		s.LastSeq, s.LastPhase = e.m.Seq, e.m.Phase
		if e.m.State != store.OutboxPending {
			s.FinishedThrough = e.m.Seq
		}
		above := e.m.Seq > after
		switch e.m.State {
		case store.OutboxPending:
			s.Pending++
		case store.OutboxDelivered:
			if above {
				s.Delivered++
			}
			s.DeliveredPhase = e.m.Phase
		case store.OutboxFailed:
			if above {
				s.Failed++
			}
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
	for _, list := range o.bots {
		for _, e := range list {
			if e.m.State == store.OutboxPending {
				st.Pending++
			}
		}
		if h := head(list); h != nil && h.claimable(now) && (st.OldestDue.IsZero() || h.m.NextAttemptAt.Before(st.OldestDue)) {
			st.OldestDue = h.m.NextAttemptAt
		}
	}
	return st, nil
}
