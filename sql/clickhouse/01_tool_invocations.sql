-- ClickHouse side of the export of agent.tool_invocations (issue 6).
-- Written for ClickHouse 18.16 (Debian 12); see docs/export.md for what
-- newer versions allow.  Applied by scripts/clickhouse.sh start, or by hand:
--   clickhouse-client --multiquery < sql/clickhouse/01_tool_invocations.sql
--
-- One row per (org_id, workspace_id, invocation_id) and PostgreSQL commit:
-- the exporter writes every committed version with _version = the commit
-- LSN of its transaction, and ReplacingMergeTree keeps the highest version.
-- Re-sent batches (a crash between the ClickHouse insert and the slot
-- advance) carry the same versions, so they collapse with the originals.
-- Deletes arrive as a row with _deleted = 1.
--
-- Read deduplicated rows with FINAL (or argMax, see docs/export.md):
--   SELECT * FROM tool_invocations FINAL WHERE _deleted = 0
--
-- Timestamps: 18.16 has no DateTime64, so each PostgreSQL timestamptz is a
-- DateTime (seconds, UTC, for grouping) plus the exact epoch milliseconds.
CREATE TABLE IF NOT EXISTS tool_invocations
(
    org_id            UUID,
    workspace_id      UUID,
    invocation_id     UUID,
    agent_id          Nullable(UUID),
    conversation_id   Nullable(UUID),
    tool_name         String,
    language          String,
    status            String,
    exit_code         Nullable(Int32),
    signal            Nullable(Int32),
    duration_ms       Nullable(Int64),
    cpu_ms            Nullable(Int64),
    peak_memory_bytes Nullable(Int64),
    credits_charged   Int32,
    timed_out         UInt8,
    oom_killed        UInt8,
    output_truncated  UInt8,
    started_at        Nullable(DateTime),
    started_at_ms     Nullable(Int64),
    finished_at       Nullable(DateTime),
    finished_at_ms    Nullable(Int64),
    created_at        DateTime,
    created_at_ms     Int64,
    _deleted          UInt8,
    _version          UInt64,
    _exported_at      DateTime DEFAULT now()
)
ENGINE = ReplacingMergeTree(_version)
PARTITION BY toYYYYMM(created_at)
ORDER BY (org_id, workspace_id, invocation_id);
