-- +goose Up

-- Raw samples, one per server and time; kept 48 hours (pruned by whole
-- hours). The derived percentages are stored so that aggregates and the
-- fleet view need no JSON: disk_used_percent is the largest used% of the
-- sample's filesystems (NULL when it has none), swap_used_percent is NULL
-- without swap.
CREATE TABLE metric_samples (
    server_id           TEXT NOT NULL,             -- no foreign key: retention removes samples of deleted servers
    at                  BIGINT NOT NULL,          -- the sample's own time
    cpu_percent         DOUBLE PRECISION NOT NULL,
    load1               DOUBLE PRECISION NOT NULL,
    load5               DOUBLE PRECISION NOT NULL,
    load15              DOUBLE PRECISION NOT NULL,
    memory_total        BIGINT NOT NULL,
    memory_used         BIGINT NOT NULL,
    memory_available    BIGINT NOT NULL,
    swap_total          BIGINT NOT NULL,
    swap_used           BIGINT NOT NULL,
    net_rx_bytes_per_s  DOUBLE PRECISION NOT NULL,
    net_tx_bytes_per_s  DOUBLE PRECISION NOT NULL,
    uptime_seconds      BIGINT NOT NULL,
    memory_used_percent DOUBLE PRECISION,
    swap_used_percent   DOUBLE PRECISION,
    disk_used_percent   DOUBLE PRECISION,
    filesystems         TEXT NOT NULL DEFAULT '[]', -- JSON array of agentproto.FilesystemSample
    received_at         BIGINT NOT NULL,
    PRIMARY KEY (server_id, at)
);
CREATE INDEX metric_samples_at ON metric_samples(at);

-- Hourly rollups, kept 100 days. Sums and counts rather than averages, so
-- that samples arriving after their raw hour was pruned can be merged in:
-- the average of a metric is its sum over its count (samples, or the
-- metric's own count for the ones that may be NULL).
CREATE TABLE metric_hourly (
    server_id      TEXT NOT NULL,
    hour           BIGINT NOT NULL,               -- start of the hour
    samples        BIGINT NOT NULL,
    cpu_sum        DOUBLE PRECISION NOT NULL,
    cpu_max        DOUBLE PRECISION NOT NULL,
    load1_sum      DOUBLE PRECISION NOT NULL,
    load1_max      DOUBLE PRECISION NOT NULL,
    load5_sum      DOUBLE PRECISION NOT NULL,
    load15_sum     DOUBLE PRECISION NOT NULL,
    mem_used_sum   DOUBLE PRECISION NOT NULL,
    mem_total_sum  DOUBLE PRECISION NOT NULL,
    mem_pct_sum    DOUBLE PRECISION NOT NULL,
    mem_pct_n      BIGINT NOT NULL,
    mem_pct_max    DOUBLE PRECISION,
    swap_pct_sum   DOUBLE PRECISION NOT NULL,
    swap_pct_n     BIGINT NOT NULL,
    swap_pct_max   DOUBLE PRECISION,
    disk_pct_sum   DOUBLE PRECISION NOT NULL,
    disk_pct_n     BIGINT NOT NULL,
    disk_pct_max   DOUBLE PRECISION,
    net_rx_sum     DOUBLE PRECISION NOT NULL,
    net_rx_max     DOUBLE PRECISION NOT NULL,
    net_tx_sum     DOUBLE PRECISION NOT NULL,
    net_tx_max     DOUBLE PRECISION NOT NULL,
    updated_at     BIGINT NOT NULL,
    PRIMARY KEY (server_id, hour)
);
CREATE INDEX metric_hourly_hour ON metric_hourly(hour);

-- Hours whose rollup must be recomputed from the raw samples: every insert
-- marks the hours it touched; the rollup loop recomputes and unmarks them.
CREATE TABLE metric_dirty_hours (
    server_id TEXT NOT NULL,
    hour      BIGINT NOT NULL,
    PRIMARY KEY (server_id, hour)
);

-- The newest sample of each server, for listings without a scan of the
-- samples. Ingest locks this row first, which serializes it with the
-- rollup of the same server.
CREATE TABLE metric_latest (
    server_id           TEXT PRIMARY KEY,
    at                  BIGINT NOT NULL,
    cpu_percent         DOUBLE PRECISION NOT NULL,
    load1               DOUBLE PRECISION NOT NULL,
    memory_used_percent DOUBLE PRECISION,
    disk_used_percent   DOUBLE PRECISION,
    uptime_seconds      BIGINT NOT NULL
);

-- The latest inventory report of each server.
CREATE TABLE server_inventory (
    server_id    TEXT PRIMARY KEY,
    collected_at BIGINT NOT NULL,
    received_at  BIGINT NOT NULL,
    data         TEXT NOT NULL                    -- JSON: services, containers, ports
);

-- +goose Down
DROP TABLE server_inventory;
DROP TABLE metric_latest;
DROP TABLE metric_dirty_hours;
DROP TABLE metric_hourly;
DROP TABLE metric_samples;
