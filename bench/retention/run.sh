#!/usr/bin/env bash
# Benchmark of retention pruning (issue 17): should agent.invocation_output
# be partitioned by time?  Measures, never asserts.
#
# On copies of agent.invocation_output's shape (same columns, keys and the
# retention index) in a throwaway cluster, ROWS output chunks of CHUNK bytes
# spread over 60 days, pruning what is older than 30 days:
#   1. what sandbox_ext does: batched UPDATE (data emptied, sha256 and size
#      kept), BATCH rows per transaction: total and longest batch (the
#      longest time one transaction holds its row locks);
#   2. baseline: batched DELETE of the same rows (keeps nothing);
#   3. partitioned by day: DROP of the 30 old partitions (keeps nothing, one
#      org's retention for all);
#   4. the write path: inserting the ROWS into the plain and the
#      partitioned table.
# Prints each figure and its ratio to (1) / to the plain insert.
#   ROWS=100000 CHUNK=512 BATCH=1000 bench/retention/run.sh
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PGBIN=$(dirname "$PG_CONFIG")
ROWS=${ROWS:-100000}
CHUNK=${CHUNK:-512}
BATCH=${BATCH:-1000}
export SANDBOX_CLUSTER_DIR=${BENCH_CLUSTER_DIR:-/tmp/sandbox_retention_bench}
export SANDBOX_PGPORT=${BENCH_PGPORT:-56219}
export SANDBOX_DB=bench
# shellcheck source=../lib.sh
. "$top/bench/lib.sh"
bench_need_extension
trap '"$top/scripts/cluster.sh" stop >/dev/null 2>&1' EXIT
bench_start_cluster
psql() { as_pg "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$SANDBOX_CLUSTER_DIR" -p "$SANDBOX_PGPORT" -d bench "$@"; }

psql -v rows="$ROWS" -v chunk="$CHUNK" -v batch="$BATCH" <<'SQL'
CREATE TABLE plain (LIKE agent.invocation_output INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES);
CREATE TABLE dele (LIKE agent.invocation_output INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES);
CREATE TABLE part (LIKE agent.invocation_output INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
	PARTITION BY RANGE (created_at);
-- a partitioned table's primary key must hold the partition key
ALTER TABLE part ADD PRIMARY KEY (invocation_id, seq, created_at);
CREATE INDEX ON part (org_id, created_at) WHERE pruned_at IS NULL;
SELECT format('CREATE TABLE part_%s PARTITION OF part FOR VALUES FROM (%L) TO (%L)',
			  to_char(d, 'YYYYMMDD'), d, d + interval '1 day')
  FROM generate_series(date_trunc('day', now()) - interval '60 days', date_trunc('day', now()), interval '1 day') d
\gexec
CREATE TABLE src AS
SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(g / 50), 12, '0'))::uuid AS invocation_id,
	   g % 50 + 1 AS seq,
	   '10000000-0000-4000-8000-000000000001'::uuid AS org_id,
	   '20000000-0000-4000-8000-000000000001'::uuid AS workspace_id,
	   'stdout' AS stream, repeat(md5(g::text), :chunk / 32) AS data,
	   now() - (g::float8 / :rows) * interval '60 days' AS created_at
  FROM generate_series(0, :rows - 1) g;
CREATE TABLE timing (what text, ms float8);
CREATE PROCEDURE timed_insert(t text) LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz := clock_timestamp();
BEGIN
	EXECUTE format('INSERT INTO %I (invocation_id, seq, org_id, workspace_id, stream, data, created_at)
					SELECT invocation_id, seq, org_id, workspace_id, stream, data, created_at FROM src', t);
	INSERT INTO timing VALUES ('insert ' || t, extract(epoch FROM clock_timestamp() - t0) * 1000);
END $$;
CALL timed_insert('plain');
CALL timed_insert('dele');
CALL timed_insert('part');
VACUUM ANALYZE plain, dele, part;

-- (1) the UPDATE sandbox_ext's _prune_batch runs, BATCH rows a transaction
CREATE PROCEDURE prune_update(b integer) LANGUAGE plpgsql AS $$
DECLARE n integer; t0 timestamptz;
BEGIN
	LOOP
		t0 := clock_timestamp();
		WITH c AS (SELECT o.invocation_id, o.seq FROM plain o
					WHERE o.org_id = '10000000-0000-4000-8000-000000000001' AND o.created_at < now() - interval '30 days'
					  AND o.pruned_at IS NULL ORDER BY o.created_at LIMIT b FOR UPDATE SKIP LOCKED),
		u AS (UPDATE plain o SET data_bytes = octet_length(o.data),
					 data_sha256 = encode(sha256(convert_to(o.data, 'UTF8')), 'hex'), data = '', pruned_at = now()
				FROM c WHERE o.invocation_id = c.invocation_id AND o.seq = c.seq RETURNING 1)
		SELECT count(*) INTO n FROM u;
		INSERT INTO timing VALUES ('update batch', extract(epoch FROM clock_timestamp() - t0) * 1000);
		COMMIT;
		EXIT WHEN n < b;
	END LOOP;
END $$;
-- (2) the same rows deleted
CREATE PROCEDURE prune_delete(b integer) LANGUAGE plpgsql AS $$
DECLARE n integer; t0 timestamptz;
BEGIN
	LOOP
		t0 := clock_timestamp();
		WITH c AS (SELECT o.invocation_id, o.seq FROM dele o
					WHERE o.org_id = '10000000-0000-4000-8000-000000000001' AND o.created_at < now() - interval '30 days'
					  AND o.pruned_at IS NULL ORDER BY o.created_at LIMIT b FOR UPDATE SKIP LOCKED),
		d AS (DELETE FROM dele o USING c WHERE o.invocation_id = c.invocation_id AND o.seq = c.seq RETURNING 1)
		SELECT count(*) INTO n FROM d;
		INSERT INTO timing VALUES ('delete batch', extract(epoch FROM clock_timestamp() - t0) * 1000);
		COMMIT;
		EXIT WHEN n < b;
	END LOOP;
END $$;
-- (3) the old partitions dropped
CREATE PROCEDURE prune_drop() LANGUAGE plpgsql AS $$
DECLARE r record; t0 timestamptz;
BEGIN
	FOR r IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			  WHERE i.inhparent = 'part'::regclass
				AND c.relname < 'part_' || to_char(now() - interval '30 days', 'YYYYMMDD') ORDER BY 1 LOOP
		t0 := clock_timestamp();
		EXECUTE format('DROP TABLE %I', r.relname);
		INSERT INTO timing VALUES ('drop partition', extract(epoch FROM clock_timestamp() - t0) * 1000);
		COMMIT;
	END LOOP;
END $$;
CALL prune_update(:batch);
CALL prune_delete(:batch);
CALL prune_drop();
SQL

psql <<'SQL'
\pset format unaligned
\pset tuples_only on
WITH t AS (SELECT what, count(*) n, sum(ms) total, max(ms) longest FROM timing GROUP BY what),
	 base AS (SELECT total FROM t WHERE what = 'update batch'),
	 ins AS (SELECT total FROM t WHERE what = 'insert plain')
SELECT format('%-16s %6s x  total %10s ms  longest %8s ms  ratio %6s', t.what, t.n,
			  round(t.total::numeric, 1), round(t.longest::numeric, 1),
			  round((t.total / CASE WHEN t.what LIKE 'insert%' THEN ins.total ELSE base.total END)::numeric, 3))
  FROM t, base, ins ORDER BY t.what;
SELECT format('rows pruned (update): %s of %s; table size after: plain %s, deleted %s, partitioned %s',
			  (SELECT count(*) FROM plain WHERE pruned_at IS NOT NULL), (SELECT count(*) FROM plain),
			  pg_size_pretty(pg_total_relation_size('plain')), pg_size_pretty(pg_total_relation_size('dele')),
			  pg_size_pretty((SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits WHERE inhparent = 'part'::regclass)));
SQL
