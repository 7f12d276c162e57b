-- plpgsql_check over every PL/pgSQL function of the extension, with every
-- check it has (errors, warnings, extra, performance, security and
-- compatibility warnings): what -Wall -Werror is to the C code.  A finding
-- fails its function's test unless it is on the allow-list below, and an
-- allow-list entry that no longer matches a finding fails too (remove it).
-- Trigger functions are checked against each table they are attached to.
--
-- Needs the plpgsql_check extension (Debian: postgresql-15-plpgsql-check,
-- installed by scripts/deps.sh); it is created here and rolled back.
BEGIN;
CREATE EXTENSION plpgsql_check;

CREATE TEMP TABLE fns AS
SELECT p.oid AS fn_oid, p.oid::regprocedure::text AS fn
  FROM pg_proc p
  JOIN pg_language l ON l.oid = p.prolang AND l.lanname = 'plpgsql'
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'sandbox_ext');

-- What plpgsql_check finds, one row per finding: "message: detail".
CREATE TEMP TABLE findings AS
SELECT f.fn, c.lineno, c.level, c.message || coalesce(': ' || c.detail, '') AS finding
  FROM fns f
  LEFT JOIN pg_trigger t ON t.tgfoid = f.fn_oid
 CROSS JOIN LATERAL plpgsql_check_function_tb(f.fn_oid, coalesce(t.tgrelid, 0),
		fatal_errors => false, other_warnings => true, performance_warnings => true,
		extra_warnings => true, security_warnings => true, compatibility_warnings => true) c;

-- The allow-list: each entry says why the finding stays.
CREATE TEMP TABLE allowed (fn text, finding text, why text NOT NULL);
-- (empty: every finding is fixed)

SELECT plan((SELECT count(*)::integer FROM fns) + 2);

SELECT cmp_ok((SELECT count(*)::integer FROM fns), '>=', 40,
	'the extension''s PL/pgSQL functions are all found');

SELECT is((SELECT string_agg(format('line %s, %s: %s', x.lineno, x.level, x.finding), E'\n'
							 ORDER BY x.lineno, x.finding)
			 FROM findings x
			WHERE x.fn = f.fn
			  AND NOT EXISTS (SELECT 1 FROM allowed a WHERE a.fn = x.fn AND a.finding = x.finding)),
		  NULL, 'plpgsql_check: ' || f.fn)
  FROM fns f
 ORDER BY f.fn;

SELECT is_empty($$SELECT a.fn, a.finding FROM allowed a
				   WHERE NOT EXISTS (SELECT 1 FROM findings x WHERE x.fn = a.fn AND x.finding = a.finding)$$,
	'every allow-listed finding still occurs (remove those that were fixed)');

SELECT * FROM finish();
ROLLBACK;
