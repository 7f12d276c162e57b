-- Project-wide security invariants, over every object of schema agent
-- whichever part of the project (control plane, supervisor, sessions,
-- export) created it.
BEGIN;
SELECT plan(6);

-- Every table that holds a tenant's rows has row-level security on.
SELECT is(ARRAY(SELECT c.relname::text FROM pg_class c
				 WHERE c.relnamespace = 'agent'::regnamespace AND c.relkind = 'r'
				   AND NOT c.relrowsecurity
				   AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid
								  AND a.attname IN ('org_id', 'session_id', 'skill_id')
								  AND NOT a.attisdropped)
				 ORDER BY 1),
		  '{}'::text[], 'row-level security is on for every table with tenant rows');

-- PUBLIC executes only what policies and CHECKs call as the current user.
SELECT is(ARRAY(SELECT p.proname::text FROM pg_proc p
				 WHERE p.pronamespace = 'agent'::regnamespace
				   AND has_function_privilege('public', p.oid, 'EXECUTE')
				 ORDER BY 1),
		  ARRAY['code_sha256', 'current_org', 'current_workspace'],
		  'PUBLIC may execute only the tenant accessors and the hash');

-- PUBLIC reads no table of the schema.
SELECT is(ARRAY(SELECT c.relname::text FROM pg_class c
				 WHERE c.relnamespace = 'agent'::regnamespace AND c.relkind IN ('r', 'v')
				   AND has_table_privilege('public', c.oid, 'SELECT')
				 ORDER BY 1),
		  '{}'::text[], 'PUBLIC reads no table or view');

-- agent_backend and agent_admin write no table directly (not one column):
-- everything goes through the API.  Without UPDATE, DELETE or TRUNCATE they
-- can neither LOCK a table beyond ACCESS SHARE nor take row locks with
-- SELECT ... FOR UPDATE (40_hostile_backend.sql tries).
SELECT is(ARRAY(SELECT DISTINCT r || ': ' || c.relname::text FROM pg_class c,
					unnest(ARRAY['agent_backend', 'agent_admin']) r,
					unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) priv
				 WHERE c.relnamespace = 'agent'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
				   AND (has_table_privilege(r, c.oid, priv)
						OR (priv IN ('INSERT', 'UPDATE', 'REFERENCES')
							AND has_any_column_privilege(r, c.oid, priv)))
				 ORDER BY 1),
		  '{}'::text[],
		  'agent_backend and agent_admin write no table of schema agent directly');

-- agent_auditor reads everything and writes nothing.
SELECT is(ARRAY(SELECT c.relname::text FROM pg_class c
				 WHERE c.relnamespace = 'agent'::regnamespace AND c.relkind = 'r'
				   AND NOT has_table_privilege('agent_auditor', c.oid, 'SELECT')
				 ORDER BY 1),
		  '{}'::text[], 'agent_auditor reads every table');
SELECT is(ARRAY(SELECT DISTINCT c.relname::text FROM pg_class c,
					unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) priv
				 WHERE c.relnamespace = 'agent'::regnamespace AND c.relkind = 'r'
				   AND has_table_privilege('agent_auditor', c.oid, priv)
				 ORDER BY 1),
		  '{}'::text[], 'agent_auditor writes nothing');

SELECT * FROM finish();
ROLLBACK;
