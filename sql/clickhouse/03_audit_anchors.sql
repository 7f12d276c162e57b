-- ClickHouse side of the audit anchors (issue 11, docs/export.md and
-- docs/security.md).  Applied by scripts/clickhouse.sh start, or by hand:
--   clickhouse-client --multiquery < sql/clickhouse/03_audit_anchors.sql
--
-- One row per published head of an org's audit chain: the exporter inserts
-- the heads that changed with every export batch and every
-- sandbox.anchor_interval, and never anything else.  Rows are only ever
-- added (MergeTree, no replacing or collapsing engine): an anchor, once
-- here, is what agent.verify_audit_chain() holds the chain to for ever.
-- A head published twice (after an exporter restart) is the same anchor
-- twice; readers group by (org_id, last_id).
--
--   org_id       the org whose chain it is
--   last_id      id of the chain's last event (agent.audit_events.id)
--   last_hash    that event's hash
--   events       number of events in the chain up to it
--   read_at_ms   when the exporter read the head (PostgreSQL's clock)
--   source       sandbox.export_slot of the publishing cluster
--   anchored_at  when ClickHouse received it (ClickHouse's clock)
--
-- For an exporter user that may insert here and change nothing, see
-- sql/clickhouse/hardened/ and docs/export.md ("Audit anchors").
CREATE TABLE IF NOT EXISTS audit_anchors
(
    org_id      UUID,
    last_id     Int64,
    last_hash   String,
    events      Int64,
    read_at_ms  Int64,
    source      String,
    anchored_at DateTime DEFAULT now()
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(anchored_at)
ORDER BY (org_id, last_id);
