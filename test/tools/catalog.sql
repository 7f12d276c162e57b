-- test/tools/catalog.sql: the catalog of sandbox_ext as sorted text, one
-- fact a line, with no OIDs, so that two databases (a fresh install and an
-- upgraded one, test/suites/upgrade.sh) can be compared with diff.
--
-- Covers the objects of schema agent and the extension's members:
-- relations with their flags and ACLs, columns in order, constraints,
-- indexes, triggers with their firing mode, policies, functions (whole
-- definition and ACL), views, types, sequences' parameters and owners,
-- comments, the extension's config-dump entries and the rows the install
-- script writes (settings, plans, runtimes).  Row data of tenants is not
-- here: the upgrade suite checks it with invariants.
\pset format unaligned
\pset tuples_only on
\pset fieldsep '|'
WITH ext AS (SELECT oid, extversion, extconfig, extcondition FROM pg_catalog.pg_extension WHERE extname = 'sandbox_ext'),
ns AS (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'agent'),
acl(a) AS (SELECT NULL::aclitem[]),
facts(kind, name, detail) AS (
	SELECT 'extension', 'sandbox_ext', 'version ' || extversion FROM ext
	UNION ALL
	SELECT 'member', pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid), ''
	  FROM pg_catalog.pg_depend d, ext WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'
	UNION ALL
	SELECT 'config_dump', c::regclass::text, coalesce(cond, '')
	  FROM ext, LATERAL unnest(ext.extconfig, ext.extcondition) AS u(c, cond)
	UNION ALL
	SELECT 'schema', 'agent', coalesce((SELECT string_agg(x::text, ',' ORDER BY x::text) FROM unnest(n.nspacl) x), '')
	  FROM pg_catalog.pg_namespace n WHERE n.nspname = 'agent'
	UNION ALL
	SELECT 'relation', c.relname,
		   format('kind=%s persistence=%s rls=%s force_rls=%s replident=%s options=%s acl=%s',
				  c.relkind, c.relpersistence, c.relrowsecurity, c.relforcerowsecurity, c.relreplident,
				  c.reloptions, (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM unnest(c.relacl) x))
	  FROM pg_catalog.pg_class c, ns WHERE c.relnamespace = ns.oid
	UNION ALL
	SELECT 'column', c.relname || '.' || lpad(row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum)::text, 3, '0') || '.' || a.attname,
		   format('%s notnull=%s default=%s identity=%s generated=%s collation=%s acl=%s',
				  pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull,
				  pg_catalog.pg_get_expr(ad.adbin, ad.adrelid), a.attidentity, a.attgenerated,
				  a.attcollation::regcollation,
				  (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM unnest(a.attacl) x))
	  FROM pg_catalog.pg_class c JOIN ns ON c.relnamespace = ns.oid
	  JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
	  LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = c.oid AND ad.adnum = a.attnum
	 WHERE c.relkind IN ('r', 'p', 'v', 'm', 'c', 'f')
	UNION ALL
	SELECT 'constraint', coalesce(c.relname, t.typname) || '.' || con.conname, pg_catalog.pg_get_constraintdef(con.oid)
	  FROM pg_catalog.pg_constraint con JOIN ns ON con.connamespace = ns.oid
	  LEFT JOIN pg_catalog.pg_class c ON c.oid = con.conrelid
	  LEFT JOIN pg_catalog.pg_type t ON t.oid = con.contypid
	UNION ALL
	SELECT 'index', c.relname, pg_catalog.pg_get_indexdef(c.oid)
	  FROM pg_catalog.pg_class c, ns WHERE c.relnamespace = ns.oid AND c.relkind IN ('i', 'I')
	UNION ALL
	SELECT 'trigger', c.relname || '.' || tg.tgname, tg.tgenabled::text || ' ' || pg_catalog.pg_get_triggerdef(tg.oid)
	  FROM pg_catalog.pg_trigger tg JOIN pg_catalog.pg_class c ON c.oid = tg.tgrelid JOIN ns ON c.relnamespace = ns.oid
	 WHERE NOT tg.tgisinternal
	UNION ALL
	SELECT 'policy', p.tablename || '.' || p.policyname,
		   format('%s %s roles=%s using=%s check=%s', p.permissive, p.cmd,
				  (SELECT string_agg(r, ',' ORDER BY r) FROM unnest(p.roles) r), p.qual, p.with_check)
	  FROM pg_catalog.pg_policies p WHERE p.schemaname = 'agent'
	UNION ALL
	SELECT 'function', p.oid::regprocedure::text,
		   pg_catalog.pg_get_functiondef(p.oid) || ' acl=' ||
		   coalesce((SELECT string_agg(x::text, ',' ORDER BY x::text) FROM unnest(p.proacl) x), '(default)')
	  FROM pg_catalog.pg_proc p, ns WHERE p.pronamespace = ns.oid AND p.prokind IN ('f', 'p')
	UNION ALL
	SELECT 'aggregate', p.oid::regprocedure::text, ''
	  FROM pg_catalog.pg_proc p, ns WHERE p.pronamespace = ns.oid AND p.prokind NOT IN ('f', 'p')
	UNION ALL
	SELECT 'view', c.relname, pg_catalog.pg_get_viewdef(c.oid)
	  FROM pg_catalog.pg_class c, ns WHERE c.relnamespace = ns.oid AND c.relkind IN ('v', 'm')
	UNION ALL
	SELECT 'type', t.typname, format('type=%s acl=%s', t.typtype,
		   (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM unnest(t.typacl) x))
	  FROM pg_catalog.pg_type t, ns WHERE t.typnamespace = ns.oid AND t.typtype IN ('c', 'e', 'd', 'r')
	   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid AND c.relkind <> 'c')
	UNION ALL
	SELECT 'enum', t.typname || '.' || e.enumsortorder, e.enumlabel
	  FROM pg_catalog.pg_enum e JOIN pg_catalog.pg_type t ON t.oid = e.enumtypid JOIN ns ON t.typnamespace = ns.oid
	UNION ALL
	SELECT 'sequence', s.seqrelid::regclass::text,
		   format('%s start=%s inc=%s min=%s max=%s cache=%s cycle=%s owned_by=%s',
				  s.seqtypid::regtype, s.seqstart, s.seqincrement, s.seqmin, s.seqmax, s.seqcache, s.seqcycle,
				  (SELECT pg_catalog.pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid)
					 FROM pg_catalog.pg_depend d
					WHERE d.classid = 'pg_class'::regclass AND d.objid = s.seqrelid AND d.deptype IN ('a', 'i')
					  AND d.refclassid = 'pg_class'::regclass))
	  FROM pg_catalog.pg_sequence s JOIN pg_catalog.pg_class c ON c.oid = s.seqrelid JOIN ns ON c.relnamespace = ns.oid
	UNION ALL
	SELECT 'comment', pg_catalog.pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description
	  FROM pg_catalog.pg_description d
	 WHERE (d.classoid = 'pg_class'::regclass AND d.objoid IN (SELECT c.oid FROM pg_catalog.pg_class c, ns WHERE c.relnamespace = ns.oid))
		OR (d.classoid = 'pg_proc'::regclass AND d.objoid IN (SELECT p.oid FROM pg_catalog.pg_proc p, ns WHERE p.pronamespace = ns.oid))
		OR (d.classoid = 'pg_type'::regclass AND d.objoid IN (SELECT t.oid FROM pg_catalog.pg_type t, ns WHERE t.typnamespace = ns.oid))
		OR (d.classoid = 'pg_namespace'::regclass AND d.objoid IN (SELECT oid FROM ns))
		OR (d.classoid = 'pg_trigger'::regclass AND d.objoid IN (SELECT tg.oid FROM pg_catalog.pg_trigger tg JOIN pg_catalog.pg_class c ON c.oid = tg.tgrelid JOIN ns ON c.relnamespace = ns.oid))
		OR (d.classoid = 'pg_policy'::regclass AND d.objoid IN (SELECT po.oid FROM pg_catalog.pg_policy po JOIN pg_catalog.pg_class c ON c.oid = po.polrelid JOIN ns ON c.relnamespace = ns.oid))
		OR (d.classoid = 'pg_constraint'::regclass AND d.objoid IN (SELECT con.oid FROM pg_catalog.pg_constraint con, ns WHERE con.connamespace = ns.oid))
	UNION ALL
	SELECT 'setting', s.key, s.value || ' | ' || s.description FROM agent.settings s
	UNION ALL
	SELECT 'plan', p.plan, row_to_json(p)::text FROM agent.plans p
	UNION ALL
	SELECT 'runtime', r.language, row_to_json(r)::text FROM agent.runtimes r
)
SELECT kind, name, replace(detail, E'\n', E'\n\t') FROM facts ORDER BY kind, name, detail;
