-- +goose Up

-- Raw samples of database instances, one per instance and time; kept 48
-- hours (pruned by whole hours), like the servers' samples. A sample with
-- an error could not be taken: its figures are NULL. Figures an engine
-- does not have are NULL too. databases is a JSON array of
-- agentproto.DBSize.
CREATE TABLE database_metric_samples (
    instance_id     TEXT NOT NULL,             -- no foreign key: retention removes samples of deleted instances
    at              BIGINT NOT NULL,           -- the sample's own time
    error           TEXT NOT NULL DEFAULT '',
    connections     BIGINT,
    max_connections BIGINT,
    size_bytes      BIGINT,
    memory_bytes    BIGINT,
    keys_count      BIGINT,
    ops_per_s       DOUBLE PRECISION,
    databases       TEXT NOT NULL DEFAULT '[]',
    received_at     BIGINT NOT NULL,
    PRIMARY KEY (instance_id, at)
);
CREATE INDEX database_metric_samples_at ON database_metric_samples(at);

-- Hourly rollups, kept 100 days: sums, counts of the non-NULL values and
-- maxima, so the average of a figure is its sum over its count.
CREATE TABLE database_metric_hourly (
    instance_id  TEXT NOT NULL,
    hour         BIGINT NOT NULL,              -- start of the hour
    samples      BIGINT NOT NULL,
    errors       BIGINT NOT NULL,
    conn_sum     DOUBLE PRECISION NOT NULL,
    conn_n       BIGINT NOT NULL,
    conn_max     BIGINT,
    maxconn_max  BIGINT,
    size_sum     DOUBLE PRECISION NOT NULL,
    size_n       BIGINT NOT NULL,
    size_max     BIGINT,
    mem_sum      DOUBLE PRECISION NOT NULL,
    mem_n        BIGINT NOT NULL,
    mem_max      BIGINT,
    keys_sum     DOUBLE PRECISION NOT NULL,
    keys_n       BIGINT NOT NULL,
    keys_max     BIGINT,
    ops_sum      DOUBLE PRECISION NOT NULL,
    ops_n        BIGINT NOT NULL,
    ops_max      DOUBLE PRECISION,
    updated_at   BIGINT NOT NULL,
    PRIMARY KEY (instance_id, hour)
);
CREATE INDEX database_metric_hourly_hour ON database_metric_hourly(hour);

-- Hours whose rollup must be recomputed from the raw samples: every insert
-- marks the hours it touched and raises rev; the rollup loop recomputes
-- them and unmarks an hour only if rev is still the one it read, so a
-- sample stored meanwhile is rolled up the next time.
CREATE TABLE database_metric_dirty_hours (
    instance_id TEXT NOT NULL,
    hour        BIGINT NOT NULL,
    rev         BIGINT NOT NULL DEFAULT 1,
    PRIMARY KEY (instance_id, hour)
);

-- +goose Down
DROP TABLE database_metric_dirty_hours;
DROP TABLE database_metric_hourly;
DROP TABLE database_metric_samples;
