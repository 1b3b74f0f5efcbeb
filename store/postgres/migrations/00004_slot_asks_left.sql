-- When the container that made a slot's latest ask hung up its wait for work (its connection
-- closed before the answer, as it does when the container dies), in the database's clock; NULL
-- while it has not. Set only on the ask of the same credential that is not newer than the
-- hung-up wait; every ask clears it (the container came back).

-- +goose Up
ALTER TABLE slot_asks ADD COLUMN left_at timestamptz;

-- +goose Down
ALTER TABLE slot_asks DROP COLUMN left_at;
