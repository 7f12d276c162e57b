-- Server CPU time per request+approve pair, independent of what else the
-- machine is doing: one backend runs the pairs itself (two transactions
-- each, as in request_approve.sql) and reads its own CPU clock from
-- /proc/self/schedstat (Linux; needs superuser for pg_read_file).
\set ON_ERROR_STOP on
\set pairs 3000
SELECT split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint AS t0 \gset
DO $$
DECLARE
	r agent.execution_request;
	o int;
	v uuid;
BEGIN
	FOR i IN 1 .. 3000 LOOP
		o := i % current_setting('bench.orgs')::int;
		PERFORM agent.set_tenant(bench.id('org', o), bench.id('ws', o));
		r := agent.request_execution(bench.id('ws', o), bench.id('agent', o), NULL,
									 'python', 'import math; print(math.pi)', 'bench-user');
		COMMIT;
		PERFORM agent.set_tenant(bench.id('org', o), bench.id('ws', o));
		v := agent.approve(r.approval_id, 'bench-approver');
		COMMIT;
	END LOOP;
END
$$;
SELECT 'server CPU per request+approve pair: '
	   || round((split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint - :t0)
				/ :pairs / 1000.0) || ' us';
