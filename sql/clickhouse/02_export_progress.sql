-- Export watermark: the end LSN of the last PostgreSQL transaction whose
-- rows are in tool_invocations, per replication slot.  The exporter writes
-- it after each batch of rows (rows first, then the watermark) and reads
-- max(lsn) when it starts, skipping transactions it already delivered, so
-- a crash between the ClickHouse insert and the slot advance does not
-- insert the batch again.
CREATE TABLE IF NOT EXISTS export_progress
(
    slot       String,
    lsn        UInt64,
    rows       UInt64,
    updated_at DateTime DEFAULT now()
)
ENGINE = ReplacingMergeTree(lsn)
ORDER BY slot;
