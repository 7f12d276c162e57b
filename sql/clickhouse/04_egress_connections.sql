-- ClickHouse side of the export of agent.egress_connections (issue 14):
-- every connection attempt of a run through its egress proxy, beside the
-- run's row in tool_invocations (same org_id, workspace_id,
-- invocation_id).  Written for ClickHouse 18.16 (Debian 12); applied by
-- scripts/clickhouse.sh start, or by hand:
--   clickhouse-client --multiquery < sql/clickhouse/04_egress_connections.sql
--
-- One row per (org_id, workspace_id, invocation_id, seq) and PostgreSQL
-- commit, as in tool_invocations: _version is the commit LSN of the row's
-- transaction (a run's connection rows commit with its invocation row, so
-- both carry the same version), ReplacingMergeTree keeps the highest, and
-- a batch re-sent after a crash collapses with the original.  The
-- exporter's watermark (export_progress) covers both tables.  Deletes
-- arrive as a row with _deleted = 1.
--
-- Read deduplicated rows with FINAL (or argMax, see docs/export.md):
--   SELECT * FROM egress_connections FINAL WHERE _deleted = 0
--
-- address is the text of the PostgreSQL inet (NULL for a refused name,
-- never resolved); rule_id is the rule that matched the host or address,
-- also on a refusal after the match (a forbidden or the host's own
-- address, a cap, a failed lookup or connect, a TLS server name that is
-- not the host); NULL when no rule matched.  created_at as in
-- tool_invocations: DateTime seconds plus the exact epoch milliseconds.
CREATE TABLE IF NOT EXISTS egress_connections
(
    org_id          UUID,
    workspace_id    UUID,
    invocation_id   UUID,
    seq             Int32,
    kind            String,
    host            String,
    port            Int32,
    address         Nullable(String),
    allowed         UInt8,
    rule_id         Nullable(UUID),
    reason          Nullable(String),
    bytes_up        Int64,
    bytes_down      Int64,
    duration_ms     Int64,
    created_at      DateTime,
    created_at_ms   Int64,
    _deleted        UInt8,
    _version        UInt64,
    _exported_at    DateTime DEFAULT now()
)
ENGINE = ReplacingMergeTree(_version)
PARTITION BY toYYYYMM(created_at)
ORDER BY (org_id, workspace_id, invocation_id, seq);
