-- Webhook messages (store.Outbox): one row per bot phase change to POST, kept until delivered
-- or given up, then for the retention of bot events. Rows are written by the bot controller of
-- any replica and claimed by the leader's relay with FOR UPDATE SKIP LOCKED; claimed_until is
-- the lease that lets another relay claim a message whose claimer died. A bot's messages go
-- out in seq order: only the lowest pending seq of a bot is claimed. payload is bytea, not
-- jsonb: the signature covers its exact bytes. The signing key is never stored, only the
-- Secret that holds it. Times are in the database's clock (see clock.go).

-- +goose Up
CREATE TABLE webhook_outbox (
    id              text PRIMARY KEY CHECK (id <> ''),
    bot_uid         text NOT NULL CHECK (bot_uid <> ''),
    seq             bigint NOT NULL,
    namespace       text NOT NULL,
    name            text NOT NULL,
    phase           text NOT NULL,
    url             text NOT NULL CHECK (url <> ''),
    payload         bytea NOT NULL,
    secret_name     text NOT NULL DEFAULT '',
    secret_key      text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    claimed_until   timestamptz,
    last_error      text NOT NULL DEFAULT '',
    finished_at     timestamptz
);
-- A bot's messages are numbered once; the index also serves a bot's summary.
CREATE UNIQUE INDEX webhook_outbox_bot_seq_idx ON webhook_outbox (bot_uid, seq);
-- The relay's claim: the head of each bot's pending messages.
CREATE INDEX webhook_outbox_pending_idx ON webhook_outbox (bot_uid, seq) WHERE state = 'pending';
-- Retention deletes finished messages by finished_at in small batches.
CREATE INDEX webhook_outbox_finished_at_idx ON webhook_outbox (finished_at) WHERE finished_at IS NOT NULL;

-- +goose Down
DROP TABLE webhook_outbox;
