-- The latest request for work (a config call) of each slot's container, by slot uid: the proof
-- that a standby container runs and waits for a bot. Liveness, like bots.last_heartbeat: one
-- row per slot, upserted, its time in the database's clock. token_sha256 is the hash of the
-- slot credential the container used, so a reader tells the current container from an older
-- one. No foreign key to bot_pool_slots: an ask may arrive before the slot's projection.

-- +goose Up
CREATE TABLE slot_asks (
    slot_uid     text PRIMARY KEY CHECK (slot_uid <> ''),
    namespace    text NOT NULL CHECK (namespace <> ''),
    name         text NOT NULL CHECK (name <> ''),
    token_sha256 text NOT NULL,
    at           timestamptz NOT NULL
);
-- DeleteSlot removes a slot's asks by its namespace and name.
CREATE INDEX slot_asks_namespace_name_idx ON slot_asks (namespace, name);

-- +goose Down
DROP TABLE slot_asks;
