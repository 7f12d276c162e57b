-- The audit anchors where the exporter's ClickHouse user can add anchors
-- and change none (docs/export.md, "Audit anchors").  Instead of
-- sql/clickhouse/03_audit_anchors.sql, for ClickHouse 18.16, whose users
-- (users.xml) have no per-table grants, only <allow_databases>:
--
--   sandbox_audit.audit_anchors  the anchors, in a database the exporter's
--                                user is not allowed (so it can neither
--                                ALTER ... DELETE, TRUNCATE, DROP, RENAME
--                                nor DETACH it); an external auditor reads
--                                it with a readonly user of its own
--   audit_anchors_in             in the export database: a Null table the
--                                exporter inserts into
--                                (sandbox.clickhouse_anchor_insert_table)
--   audit_anchors                in the export database: the materialized
--                                view that moves each inserted row into
--                                sandbox_audit.audit_anchors, stamping
--                                anchored_at with ClickHouse's clock (the
--                                inserter cannot supply it); reading it
--                                reads the anchors (what
--                                agent.verify_audit_chain() reads,
--                                sandbox.clickhouse_anchor_table)
--
-- Run as an administrator of ClickHouse, in the export database:
--   clickhouse-client --database default --multiquery < sql/clickhouse/hardened/audit_anchors.sql
-- (after DROP TABLE audit_anchors if 03_audit_anchors.sql made it).  With
-- ClickHouse 20.1 or newer, SQL grants do the same for a plain table:
--   GRANT INSERT, SELECT ON default.audit_anchors TO exporter
-- and nothing else on it.
CREATE DATABASE IF NOT EXISTS sandbox_audit;
CREATE TABLE IF NOT EXISTS sandbox_audit.audit_anchors
(
    org_id      UUID,
    last_id     Int64,
    last_hash   String,
    events      Int64,
    read_at_ms  Int64,
    source      String,
    anchored_at DateTime
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(anchored_at)
ORDER BY (org_id, last_id);
CREATE TABLE IF NOT EXISTS audit_anchors_in
(
    org_id      UUID,
    last_id     Int64,
    last_hash   String,
    events      Int64,
    read_at_ms  Int64,
    source      String
)
ENGINE = Null;
CREATE MATERIALIZED VIEW IF NOT EXISTS audit_anchors TO sandbox_audit.audit_anchors
AS SELECT org_id, last_id, last_hash, events, read_at_ms, source, now() AS anchored_at
     FROM audit_anchors_in;
