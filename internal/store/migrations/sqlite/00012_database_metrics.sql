-- +goose Up

-- Raw samples of database instances, one per instance and time; kept 48
-- hours (pruned by whole hours), like the servers' samples. A sample with
-- an error could not be taken: its figures are NULL. Figures an engine
-- does not have are NULL too. databases is a JSON array of
-- agentproto.DBSize.
CREATE TABLE database_metric_samples (
    instance_id     TEXT NOT NULL,             -- no foreign key: retention removes samples of deleted instances
    at              INTEGER NOT NULL,           -- the sample's own time
    error           TEXT NOT NULL DEFAULT '',
    connections     INTEGER,
    max_connections INTEGER,
    size_bytes      INTEGER,
    memory_bytes    INTEGER,
    keys_count      INTEGER,
    ops_per_s       REAL,
    databases       TEXT NOT NULL DEFAULT '[]',
    received_at     INTEGER NOT NULL,
    PRIMARY KEY (instance_id, at)
);
CREATE INDEX database_metric_samples_at ON database_metric_samples(at);

-- Hourly rollups, kept 100 days: sums, counts of the non-NULL values and
-- maxima, so the average of a figure is its sum over its count.
CREATE TABLE database_metric_hourly (
    instance_id  TEXT NOT NULL,
    hour         INTEGER NOT NULL,              -- start of the hour
    samples      INTEGER NOT NULL,
    errors       INTEGER NOT NULL,
    conn_sum     REAL NOT NULL,
    conn_n       INTEGER NOT NULL,
    conn_max     INTEGER,
    maxconn_max  INTEGER,
    size_sum     REAL NOT NULL,
    size_n       INTEGER NOT NULL,
    size_max     INTEGER,
    mem_sum      REAL NOT NULL,
    mem_n        INTEGER NOT NULL,
    mem_max      INTEGER,
    keys_sum     REAL NOT NULL,
    keys_n       INTEGER NOT NULL,
    keys_max     INTEGER,
    ops_sum      REAL NOT NULL,
    ops_n        INTEGER NOT NULL,
    ops_max      REAL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (instance_id, hour)
);
CREATE INDEX database_metric_hourly_hour ON database_metric_hourly(hour);

-- Hours whose rollup must be recomputed from the raw samples: every insert
-- marks the hours it touched and raises rev; the rollup loop recomputes
-- them and unmarks an hour only if rev is still the one it read, so a
-- sample stored meanwhile is rolled up the next time.
CREATE TABLE database_metric_dirty_hours (
    instance_id TEXT NOT NULL,
    hour        INTEGER NOT NULL,
    rev         INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (instance_id, hour)
);

-- +goose Down
DROP TABLE database_metric_dirty_hours;
DROP TABLE database_metric_hourly;
DROP TABLE database_metric_samples;
