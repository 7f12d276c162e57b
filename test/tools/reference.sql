-- The SQL reference as the catalog has it, for docs/reference.md's check
-- (test/suites/reference.sh): one row per function and view of schema
-- agent whose name does not start with "_", with
--   entry   the heading docs/reference.md gives it:
--           agent.NAME(ARGUMENTS) → RESULT   (pg_get_function_arguments /
--           pg_get_function_result), or agent.NAME (view)
--   roles   who may call or read it: PUBLIC, or those of agent_backend,
--           agent_admin, agent_auditor, agent_runner that may, or owner
--   codes   the SQLSTATEs its SQL or PL/pgSQL raises, with those of the
--           agent.* functions it calls (transitively); C functions raise
--           what docs/reference.md says (not checked here)
-- Run as the owner: psql -At -F '|' -f reference.sql
WITH RECURSIVE fn AS (
	-- code: the source without its string literals (a hint that names a
	-- function is not a call of it) and comments, read left to right in
	-- one pass, so that an apostrophe in a comment starts no literal and
	-- a -- in a literal starts no comment
	SELECT p.oid, p.proname, p.prosrc, l.lanname,
		   pg_catalog.regexp_replace(p.prosrc, $re$'([^']|'')*'|--[^\n]*|/\*([^*]|\*+[^*/])*\*+/$re$,
									 '''''', 'g') AS code
	  FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
	 WHERE p.pronamespace = 'agent'::regnamespace
),
calls AS (
	SELECT DISTINCT f.oid AS caller, g.oid AS callee
	  FROM fn f JOIN fn g ON f.oid <> g.oid AND f.lanname IN ('plpgsql', 'sql')
	   AND f.code ~ ('agent\.' || g.proname || '\s*\(')
),
reach AS (
	SELECT oid AS root, oid AS f FROM fn
	UNION
	SELECT r.root, c.callee FROM reach r JOIN calls c ON c.caller = r.f
),
names (name, code) AS (VALUES
	('configuration_limit_exceeded', '53400'), ('data_corrupted', 'XX001'),
	('duplicate_object', '42710'), ('insufficient_privilege', '42501'),
	('invalid_parameter_value', '22023'), ('invalid_transaction_state', '25000'),
	('no_data_found', 'P0002'), ('null_value_not_allowed', '22004'),
	('object_in_use', '55006'), ('object_not_in_prerequisite_state', '55000'),
	('program_limit_exceeded', '54000'), ('reserved_name', '42939'),
	('string_data_right_truncation', '22001'), ('undefined_table', '42P01'),
	('unique_violation', '23505'), ('lock_not_available', '55P03'),
	('serialization_failure', '40001')
),
codes AS (
	SELECT r.root, coalesce(n.code, '?' || m[1]) AS code
	  FROM reach r JOIN fn ON fn.oid = r.f
	 CROSS JOIN LATERAL pg_catalog.regexp_matches(fn.prosrc, $$ERRCODE = '([a-z_0-9]+)'$$, 'g') m
	  LEFT JOIN names n ON n.name = m[1]
	 WHERE fn.lanname IN ('plpgsql', 'sql')
),
roles_of AS (
	SELECT o.oid, o.kind, o.entry,
		   CASE WHEN o.public THEN 'PUBLIC'
				ELSE coalesce((SELECT string_agg(r, ', ' ORDER BY r) FROM unnest(o.granted) r), 'owner') END AS roles
	  FROM (
		SELECT p.oid, 'function' AS kind,
			   'agent.' || p.proname || '(' || pg_catalog.pg_get_function_arguments(p.oid) || ') → '
				   || coalesce(pg_catalog.pg_get_function_result(p.oid), 'procedure') AS entry,
			   EXISTS (SELECT 1 FROM pg_catalog.aclexplode(coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) a
						WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE') AS public,
			   ARRAY(SELECT r FROM unnest(ARRAY['agent_backend', 'agent_admin', 'agent_auditor', 'agent_runner']) r
					  WHERE pg_catalog.has_function_privilege(r, p.oid, 'EXECUTE')) AS granted
		  FROM pg_catalog.pg_proc p
		 WHERE p.pronamespace = 'agent'::regnamespace AND p.proname !~ '^_'
		UNION ALL
		SELECT c.oid, 'view', 'agent.' || c.relname || ' (view)',
			   EXISTS (SELECT 1 FROM pg_catalog.aclexplode(c.relacl) a
						WHERE a.grantee = 0 AND a.privilege_type = 'SELECT'),
			   ARRAY(SELECT r FROM unnest(ARRAY['agent_backend', 'agent_admin', 'agent_auditor', 'agent_runner']) r
					  WHERE pg_catalog.has_table_privilege(r, c.oid, 'SELECT'))
		  FROM pg_catalog.pg_class c
		 WHERE c.relnamespace = 'agent'::regnamespace AND c.relkind = 'v') o
)
SELECT ro.entry, ro.roles,
	   coalesce((SELECT string_agg(DISTINCT c.code, ', ' ORDER BY c.code) FROM codes c WHERE c.root = ro.oid), '')
  FROM roles_of ro
 ORDER BY ro.entry;
