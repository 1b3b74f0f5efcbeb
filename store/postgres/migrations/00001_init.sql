-- The first schema of the botpool store. Kubernetes uids and Coolify application uuids are kept
-- as text: Coolify's uuids are not RFC 4122, and tests use readable uids.

-- +goose Up

-- The projection of Bot objects, and their liveness: a heartbeat upserts last_heartbeat, so a
-- bot whose row vanished is whole again (with a minimal row) on its next beat.
CREATE TABLE bots (
    uid              text PRIMARY KEY CHECK (uid <> ''),
    namespace        text NOT NULL DEFAULT '',
    name             text NOT NULL DEFAULT '',
    platform         text NOT NULL DEFAULT '',
    phase            text NOT NULL DEFAULT '',
    pool             text NOT NULL DEFAULT '',
    slot_name        text NOT NULL DEFAULT '',
    application_uuid text NOT NULL DEFAULT '',
    last_heartbeat   timestamptz,
    created_at       timestamptz,
    finished_at      timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX bots_phase_idx ON bots (phase);
CREATE INDEX bots_pool_phase_idx ON bots (pool, phase);
CREATE INDEX bots_namespace_name_idx ON bots (namespace, name);

-- The projection of BotPoolSlot objects. The UNIQUE constraints are the second safety net behind
-- the API server's optimistic lock on spec.botRef: one slot per name, per application, per bot.
-- A free slot or one without an application stores NULL there (never ''), which UNIQUE ignores.
CREATE TABLE bot_pool_slots (
    namespace        text NOT NULL CHECK (namespace <> ''),
    name             text NOT NULL CHECK (name <> ''),
    pool             text NOT NULL DEFAULT '',
    phase            text NOT NULL DEFAULT '',
    application_uuid text CHECK (application_uuid <> ''),
    bot_uid          text CHECK (bot_uid <> ''),
    bot_name         text NOT NULL DEFAULT '',
    last_used_at     timestamptz,
    updated_at       timestamptz NOT NULL,
    CONSTRAINT bot_pool_slots_pkey PRIMARY KEY (namespace, name),
    CONSTRAINT bot_pool_slots_application_uuid_key UNIQUE (application_uuid),
    CONSTRAINT bot_pool_slots_bot_uid_key UNIQUE (bot_uid)
);
CREATE INDEX bot_pool_slots_pool_phase_idx ON bot_pool_slots (pool, phase);

-- The audit log of slot transitions. The id is made by the writer, so a row replayed after an
-- outage that had in fact been committed is not written twice (ON CONFLICT DO NOTHING); seq
-- orders rows written in the same microsecond.
CREATE TABLE slot_transitions (
    id               uuid PRIMARY KEY,
    seq              bigint GENERATED ALWAYS AS IDENTITY,
    namespace        text NOT NULL,
    slot             text NOT NULL,
    pool             text NOT NULL DEFAULT '',
    from_phase       text NOT NULL DEFAULT '',
    to_phase         text NOT NULL DEFAULT '',
    bot_uid          text NOT NULL DEFAULT '',
    bot_name         text NOT NULL DEFAULT '',
    application_uuid text NOT NULL DEFAULT '',
    reason           text NOT NULL DEFAULT '',
    correlation_id   text NOT NULL DEFAULT '',
    at               timestamptz NOT NULL
);
CREATE INDEX slot_transitions_slot_at_idx ON slot_transitions (namespace, slot, at);
CREATE INDEX slot_transitions_pool_at_idx ON slot_transitions (pool, at);
CREATE INDEX slot_transitions_at_idx ON slot_transitions (at);

-- What bots report (participants, logs…). No foreign key to bots: events outlive the projection
-- and may arrive before it.
CREATE TABLE bot_events (
    id        uuid PRIMARY KEY,
    seq       bigint GENERATED ALWAYS AS IDENTITY,
    bot_uid   text NOT NULL,
    namespace text NOT NULL DEFAULT '',
    name      text NOT NULL DEFAULT '',
    type      text NOT NULL,
    data      jsonb,
    at        timestamptz NOT NULL
);
CREATE INDEX bot_events_bot_at_idx ON bot_events (bot_uid, at);
CREATE INDEX bot_events_at_idx ON bot_events (at);

-- +goose Down
DROP TABLE bot_events;
DROP TABLE slot_transitions;
DROP TABLE bot_pool_slots;
DROP TABLE bots;
