-- Retention deletes finished bots by finished_at in small batches: an index keeps each batch
-- from scanning the table. Running bots (finished_at NULL) stay out of it.

-- +goose Up
CREATE INDEX bots_finished_at_idx ON bots (finished_at) WHERE finished_at IS NOT NULL;

-- +goose Down
DROP INDEX bots_finished_at_idx;
