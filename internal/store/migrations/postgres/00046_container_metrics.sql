-- +goose Up

-- The running containers' figures of a server's newest sample (JSON list
-- of agentproto.ContainerSample); NULL when that sample had none.
ALTER TABLE metric_latest ADD COLUMN containers TEXT;

-- +goose Down
ALTER TABLE metric_latest DROP COLUMN containers;
