package postgres

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"k8s.io/apimachinery/pkg/types"

	"botpool.dev/botpool/store"
)

// The outbox (table webhook_outbox, migration 00005) keeps webhook messages across restarts
// and leader changes. Its statements are never buffered: a message must be in the table
// before the bot's status counts it, and a claim must be exclusive, so during an outage every
// call is refused with store.ErrUnavailable (through read) and the caller tries again: the bot
// controller on its next pass, the relay on its next tick.
var _ store.Outbox = (*Store)(nil)

const addMessageSQL = `
INSERT INTO webhook_outbox (id, bot_uid, seq, namespace, name, phase, url, payload,
	secret_name, secret_key, created_at, next_attempt_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)
ON CONFLICT DO NOTHING
RETURNING id`

// messageExistsSQL tells an add that changed nothing because its id exists (a repeat: fine)
// from one whose (bot, seq) is another message's.
const messageExistsSQL = `SELECT EXISTS (SELECT 1 FROM webhook_outbox WHERE id = $1)`

// AddMessage implements store.Outbox.
func (s *Store) AddMessage(ctx context.Context, m store.OutboxMessage) error {
	if m.ID == "" || m.BotUID == "" || m.URL == "" {
		return errors.New("outbox message needs an id, a bot uid and a url")
	}
	created := s.toDB(store.Timestamp(m.CreatedAt, s.cfg.clock.Now()).Truncate(time.Microsecond))
	added, repeat := false, false
	err := s.read(ctx, "add_webhook_message", func(ctx context.Context) error {
		var id string
		err := s.pool.QueryRow(ctx, addMessageSQL, m.ID, string(m.BotUID), m.Seq, m.Namespace, m.Name, m.Phase,
			m.URL, []byte(m.Payload), m.SecretName, m.SecretKey, created).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return s.pool.QueryRow(ctx, messageExistsSQL, m.ID).Scan(&repeat)
		}
		added = err == nil
		return err
	})
	if err == nil && !added && !repeat {
		return store.ErrSeqTaken
	}
	return err
}

// claimMessagesSQL: heads are each bot's lowest pending seq (as of the statement's snapshot);
// those due and not under a live lease are ranked within their namespace, oldest due first, and
// taken rank by rank, so namespaces take turns. They are locked, skipping rows another claimer
// holds, and leased. The conditions are on the locked row, so a claimer that read a head
// another claimer just leased or finished checks it again on the row's newest version (READ
// COMMITTED re-evaluates them) and leaves it.
const claimMessagesSQL = `
WITH heads AS (
	SELECT DISTINCT ON (bot_uid) id, namespace, next_attempt_at, claimed_until FROM webhook_outbox
	WHERE state = 'pending'
	ORDER BY bot_uid, seq, id
), ranked AS (
	SELECT id, next_attempt_at,
		row_number() OVER (PARTITION BY namespace ORDER BY next_attempt_at, id) AS turn
	FROM heads
	WHERE next_attempt_at <= $1 AND (claimed_until IS NULL OR claimed_until <= $1)
), picked AS (
	SELECT o.id, r.turn FROM webhook_outbox o JOIN ranked r USING (id)
	WHERE o.state = 'pending' AND o.next_attempt_at <= $1
		AND (o.claimed_until IS NULL OR o.claimed_until <= $1)
	ORDER BY r.turn, r.next_attempt_at, o.id
	LIMIT $3
	FOR UPDATE OF o SKIP LOCKED
)
UPDATE webhook_outbox o SET attempts = o.attempts + 1, claimed_until = $2
FROM picked WHERE o.id = picked.id
RETURNING picked.turn, ` + outboxColumns

const outboxColumns = `o.id, o.bot_uid, o.seq, o.namespace, o.name, o.phase, o.url, o.payload,
	o.secret_name, o.secret_key, o.created_at, o.state, o.attempts, o.next_attempt_at, o.last_error`

// ClaimMessages implements store.Outbox in one statement.
func (s *Store) ClaimMessages(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]store.OutboxMessage, error) {
	if limit <= 0 {
		return nil, nil
	}
	at := s.toDB(now.Truncate(time.Microsecond))
	var claimed []claimedMessage
	err := s.read(ctx, "claim_webhook_messages", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, claimMessagesSQL, at, at.Add(lease), limit)
		if err != nil {
			return err
		}
		claimed, err = pgx.CollectRows(rows, s.scanClaimed)
		return err
	})
	if err != nil {
		return nil, err
	}
	// RETURNING keeps no order: hand them out in the claim's, namespaces taking turns.
	slices.SortFunc(claimed, func(a, b claimedMessage) int {
		return cmp.Or(cmp.Compare(a.turn, b.turn), a.m.NextAttemptAt.Compare(b.m.NextAttemptAt), strings.Compare(a.m.ID, b.m.ID))
	})
	out := make([]store.OutboxMessage, len(claimed))
	for i, c := range claimed {
		out[i] = c.m
	}
	return out, nil
}

// claimedMessage is a claimed message with its turn among its namespace's.
type claimedMessage struct {
	turn int64
	m    store.OutboxMessage
}

func (s *Store) scanClaimed(row pgx.CollectableRow) (claimedMessage, error) {
	var c claimedMessage
	var uid, state string
	var payload []byte
	m := &c.m
	err := row.Scan(&c.turn, &m.ID, &uid, &m.Seq, &m.Namespace, &m.Name, &m.Phase, &m.URL, &payload,
		&m.SecretName, &m.SecretKey, &m.CreatedAt, &state, &m.Attempts, &m.NextAttemptAt, &m.LastError)
	m.BotUID, m.State, m.Payload = types.UID(uid), store.OutboxState(state), payload
	m.CreatedAt, m.NextAttemptAt = s.fromDB(m.CreatedAt), s.fromDB(m.NextAttemptAt)
	return c, err
}

// finishAttemptSQL records an outcome on a pending message, of its latest claim only: the late
// outcome of a claim whose lease ran out, after another claimer claimed or finished the
// message, changes nothing.
const finishAttemptSQL = `
UPDATE webhook_outbox SET
	state = $2::text,
	next_attempt_at = CASE WHEN $2::text = 'pending' THEN $3::timestamptz ELSE next_attempt_at END,
	last_error = CASE WHEN $4::text <> '' THEN $4::text ELSE last_error END,
	finished_at = CASE WHEN $2::text = 'pending' THEN NULL ELSE $5::timestamptz END,
	claimed_until = NULL
WHERE id = $1 AND state = 'pending' AND attempts = $6`

// FinishAttempt implements store.Outbox.
func (s *Store) FinishAttempt(ctx context.Context, id string, o store.OutboxOutcome) error {
	state := o.State
	if state != store.OutboxDelivered && state != store.OutboxFailed {
		state = store.OutboxPending
	}
	next := s.toDB(o.NextAttemptAt.Truncate(time.Microsecond))
	finished := s.toDB(s.cfg.clock.Now().Truncate(time.Microsecond))
	return s.read(ctx, "finish_webhook_attempt", func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, finishAttemptSQL, id, string(state), next, o.Error, finished, o.Attempt)
		return err
	})
}

const outboxSummarySQL = `
SELECT
	coalesce(max(seq), 0),
	coalesce((SELECT phase FROM webhook_outbox WHERE bot_uid = $1 ORDER BY seq DESC LIMIT 1), ''),
	count(*) FILTER (WHERE state = 'pending'),
	count(*) FILTER (WHERE state = 'delivered' AND seq > $2),
	count(*) FILTER (WHERE state = 'failed' AND seq > $2),
	coalesce(max(seq) FILTER (WHERE state <> 'pending'), 0),
	coalesce((SELECT phase FROM webhook_outbox WHERE bot_uid = $1 AND state = 'delivered' ORDER BY seq DESC LIMIT 1), ''),
	coalesce((SELECT last_error FROM webhook_outbox WHERE bot_uid = $1 AND state <> 'delivered' AND last_error <> ''
		ORDER BY next_attempt_at DESC LIMIT 1), '')
FROM webhook_outbox WHERE bot_uid = $1`

// OutboxSummary implements store.Outbox in one query.
func (s *Store) OutboxSummary(ctx context.Context, bot types.UID, after int64) (store.OutboxSummary, error) {
	var sum store.OutboxSummary
	err := s.read(ctx, "webhook_summary", func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, outboxSummarySQL, string(bot), after).Scan(&sum.LastSeq, &sum.LastPhase,
			&sum.Pending, &sum.Delivered, &sum.Failed, &sum.FinishedThrough, &sum.DeliveredPhase, &sum.LastError)
	})
	return sum, err
}

// outboxStatsSQL: the oldest due is of heads that could be claimed now, as in the claim.
const outboxStatsSQL = `
WITH heads AS (
	SELECT DISTINCT ON (bot_uid) next_attempt_at, claimed_until FROM webhook_outbox
	WHERE state = 'pending'
	ORDER BY bot_uid, seq, id
)
SELECT (SELECT count(*) FROM webhook_outbox WHERE state = 'pending'),
	(SELECT min(next_attempt_at) FROM heads
		WHERE next_attempt_at <= $1 AND (claimed_until IS NULL OR claimed_until <= $1))`

// OutboxStats implements store.Outbox.
func (s *Store) OutboxStats(ctx context.Context, now time.Time) (store.OutboxStats, error) {
	var st store.OutboxStats
	var oldest *time.Time
	err := s.read(ctx, "webhook_stats", func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, outboxStatsSQL, s.toDB(now.Truncate(time.Microsecond))).Scan(&st.Pending, &oldest)
	})
	if err == nil && oldest != nil {
		st.OldestDue = s.fromDB(*oldest)
	}
	return st, err
}
